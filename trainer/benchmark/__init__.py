"""`python -m trainer.benchmark`: DLPerf-method throughput reports of `python -m trainer`.

    python -m trainer.benchmark --data DIR --format ofrecord --model base --devices 1,8 \
        --precision fp32,amp --batch-size 32,64,max --out report-dir

cli.py plans the configurations and starts one worker process (worker.py) per
(devices, precision, batch, run) and per probe of the `max` search;
method.py holds the arithmetic (throughput, medians, speed-up, FLOPs, MFU,
the search); report.py writes report.md, results.json and throughput.png.
"""
