#!/usr/bin/env bash
# The test command: set up .venv (with the [dev] extra) if needed, then run the whole suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/test_store.py -x`.
# Without a GPU the GPU tests are skipped and Triton kernels run in the interpreter.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh --dev
# shellcheck disable=SC1091
. .venv/bin/activate
if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  export TRITON_INTERPRET=1
fi
exec python -m pytest -q "$@"
