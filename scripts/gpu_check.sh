#!/usr/bin/env bash
# The one GPU check (docs/benchmarks.md, "The GPU check"): on one NVIDIA H100/H200 with Python 3.12, JAX,
# PyTorch and transformers installed and no network, build the native core, make the records, run
# trainer.benchmark (amp and fp32, batch 64 and 256, BERT-base 128/20) and the transformers peers, and
# print one table (scripts/gpu_check.py). Under 8 minutes on one H200.
#
#   bash scripts/gpu_check.sh                 # the whole check; results and logs in ./gpu-check-out
#                                             # (GPU_CHECK_OUT to choose; GPU_CHECK_ARCHIVE=FILE.tar.gz packs them)
#   bash scripts/gpu_check.sh --setup-only    # wheels, native core and records only (then prints the records' path)
#
# What it needs that such a machine lacks travels in the git-ignored folder .gpu-check/, which
# scripts/gpu_check_prepare.sh fills on a machine with the network: wheels/ (keras and the few pure
# wheels bertprep needs, for Python 3.12 on manylinux x86-64) and data/ (WikiText-2 and Google's uncased
# vocab.txt). Nothing is installed into the machine's Python: the wheels go to a folder on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$(pwd)
out=${GPU_CHECK_OUT:-$here/gpu-check-out}
work=${GPU_CHECK_WORK:-/tmp/gpu-check}
site=$work/site
mkdir -p "$out" "$work"
python=${PYTHON:-python3}

started=$(date +%s)
wheels=${GPU_CHECK_WHEELS-.gpu-check/wheels}  # empty: use the Python's own packages (a venv with them)
if [ -n "$wheels" ]; then
    # with their bytecode, as a pip install leaves them: without it the profiled warm start on an H100 compiled
    # 785 modules from source (2.1 s of builtins.compile in --phases' trainer-warm.prof, 2026-11-26)
    "$python" -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl
fi
"$python" -m compileall -q -j 0 bertprep trainer scripts >/dev/null ||  # the checkout's bytecode, as an install's
    echo "gpu_check: compileall failed: the start-up runs compile the checkout from source" >&2
export PYTHONPATH="$here:$site${PYTHONPATH:+:$PYTHONPATH}"
export KERAS_BACKEND=${KERAS_BACKEND:-jax}
"$python" setup.py -q build_ext --inplace >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
"$python" -c "import bertprep._native, bertprep._wordpiece" || { echo "gpu_check: the native core did not build" >&2; exit 1; }
records=$work/records
if [ ! -f "$records/.complete" ]; then
    rm -rf "$records"
    "$python" -m bertprep create --input .gpu-check/data/wt2.txt --vocab .gpu-check/data/vocab.txt --seq 128 \
        --pred 20 --dupe-factor 2 --format ofrecord --out "$records" --workers "$(nproc)" --quiet
    touch "$records/.complete"
fi
echo "gpu_check: setup (wheels, native core, records) took $(( $(date +%s) - started )) s; records in $records" >&2
if [ "${1:-}" = "--setup-only" ]; then
    echo "$records"
    exit 0
fi
status=0
"$python" scripts/gpu_check.py --records "$records" --out "$out" --work "$work/scratch" "$@" || status=$?
if [ -n "${GPU_CHECK_ARCHIVE:-}" ]; then
    tar czf "$GPU_CHECK_ARCHIVE" -C "$(dirname "$out")" "$(basename "$out")"
fi
exit $status
