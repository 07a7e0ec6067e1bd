#!/usr/bin/env bash
# The main job: take a model through every AutoKernel stage that exists, with state in
# $AUTOKERNEL_HOME (default ./.autokernel). Run it after `bash scripts/setup.sh`.
#   MODEL      the model to work on (default gpt2-tiny without a GPU, llama-7b with one)
#   TOP        how many bottleneck kernels to extract (default 5)
#   BACKEND    triton | cuda (default triton)
# It runs only real stages; until `autokernel loop` lands it profiles, extracts the bottleneck
# kernels, verifies the model with them plugged in, and reports. Nothing is simulated.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -x .venv/bin/python ]]; then
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi

if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  MODEL="${MODEL:-llama-7b}"
else
  MODEL="${MODEL:-gpt2-tiny}"
  export TRITON_INTERPRET=1
  echo "main_job: no CUDA GPU: running in Triton interpreter mode (TRITON_INTERPRET=1)." \
       "Kernels run on the CPU, correctly but slowly; timings are CPU timings, not GPU ones."
fi
TOP="${TOP:-5}"
BACKEND="${BACKEND:-triton}"

ak() { echo "+ autokernel $*"; python -m autokernel "$@"; }
# the commands this checkout has (other stages register themselves as they land)
commands="$(python - <<'PY'
from autokernel.cli.app import app
print(" ".join(c.name for c in app.registered_commands if c.name))
PY
)"
has() { [[ " $commands " == *" $1 "* ]]; }

if has loop; then
  ak loop --model "$MODEL" "$@"
else
  if has profile; then ak profile --model "$MODEL"; fi
  if has extract; then ak extract --top "$TOP" --backend "$BACKEND"; fi
  if has verify; then ak verify; fi
fi
ak report --format md
mkdir -p "${AUTOKERNEL_HOME:-.autokernel}"
ak report --format tsv --output "${AUTOKERNEL_HOME:-.autokernel}/results.tsv"
