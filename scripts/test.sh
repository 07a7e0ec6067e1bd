#!/usr/bin/env bash
# The test command: set up .venv (with the [dev] extra) if needed, then run the whole suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/test_store.py -x`.
# Without a GPU the GPU tests are skipped and Triton kernels run in the interpreter.
#   bash scripts/test.sh --newest-triton   the interpreter tests (every starter, the generated
#       KernelBench kernels, the sm_90 compile) under the newest Triton pyproject.toml allows, in
#       .venv-triton-newest: what `pip install .` gives a CPU user (CI runs both); the nvcc-only
#       compile tests are left out there (no Triton in them: the first pass ran them)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ "${1:-}" == "--newest-triton" ]]; then
  shift
  export AUTOKERNEL_VENV=.venv-triton-newest TRITON_CPU=newest
  set -- tests/test_kernels_*.py tests/test_gpu_compile.py tests/test_programs.py tests/test_matmul_precision.py tests/test_kb_ops.py -m "not nvcc" "$@"
fi
VENV="${AUTOKERNEL_VENV:-.venv}"
bash scripts/setup.sh --dev
# shellcheck disable=SC1091
. "$VENV/bin/activate"
if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  export TRITON_INTERPRET=1
fi
exec python -m pytest -q "$@"
