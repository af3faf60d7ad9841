#!/usr/bin/env bash
# Fill the git-ignored folder .gpu-check/ that scripts/gpu_check.sh carries to a GPU machine without
# the network: the wheels that machine's Python 3.12 lacks (keras and its two small dependencies, and
# multiprocess for bertprep's engines) and the check's data (WikiText-2 and Google's uncased vocab from
# the shared fixtures). Run here, with the network: pip downloads for Python 3.12 on manylinux x86-64.
#
#   bash scripts/gpu_check_prepare.sh [SHARED]     # SHARED: the fixtures' folder (default ../shared)
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${1:-${BERTPREP_SHARED:-../shared}}
mkdir -p .gpu-check/wheels .gpu-check/data
grep -qx "/.gpu-check/" .git/info/exclude 2>/dev/null || echo "/.gpu-check/" >>.git/info/exclude
cp "$shared/fixtures/bench/wt2.txt" "$shared/fixtures/golden/vocab.txt" .gpu-check/data/
for wheel in keras==3.15.1 namex==0.1.0 optree==0.20.0 multiprocess==0.70.19 dill==0.4.1; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any -d .gpu-check/wheels "$wheel"
done
ls .gpu-check/wheels
