#!/usr/bin/env bash
# A virtual environment that compiles for an NVIDIA GPU on a machine without one (scripts/gpu_step_traffic.py):
# JAX's CUDA plugin and NVIDIA's libraries (about 5 GB) of the JAX version in the project's .venv, which it
# reads through a .pth file. Kept apart from .venv: with the plugin installed, JAX in .venv would look for a
# GPU and say so in every run. Needs the network once.
#
#   bash scripts/gpu_compile_prepare.sh [FOLDER]      # default .gpu-compile (git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
folder=${1:-.gpu-compile}
version=$(.venv/bin/python -c 'import jax; print(jax.__version__)')
project_site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
base_python=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
"$base_python" -m venv "$folder"
"$folder/bin/pip" install -q "jax-cuda12-plugin[with-cuda]==$version"
site=$("$folder/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; site.addsitedir('$project_site')" >"$site/bertprep-venv.pth"
"$folder/bin/python" -c 'import jax, jax_plugins.xla_cuda12; print("JAX", jax.__version__, "compiles for CUDA here")'
