"""`bertprep pack`: pretraining records → packed rows of up to k sequences (the MLPerf BERT layout).

The package, by what each part does:
- `strategy`: which sequences share a row (best fill and first-fit decreasing over the length histogram);
- `layout`: rows from instances and instances from rows, in NumPy;
- `task`: the shard task (one create file in, its packed file per format out);
- `cli`: the command line (`add_arguments`, `run`), planning, resume and the summary.
"""
