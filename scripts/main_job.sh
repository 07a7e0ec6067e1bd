#!/usr/bin/env bash
# The main job: run AutoKernel's loop on an embedded default, with state in $AUTOKERNEL_HOME
# (default ./.autokernel): profile a small preset model, extract its bottleneck kernels, optimize
# them with the offline search proposer for a few minutes, verify the model with the kept kernels
# plugged in, and write the reports (report.md, results.tsv) into the home. Run it after
# `bash scripts/setup.sh`. Its last screen is the loop's recap: what was optimized, the verified
# speed-ups, where the kernels are and the commands to run next.
#   MODEL      the model (default llama-tiny without a GPU, the small `llama` preset with one)
#   HOURS      the loop's time budget (default 0.05 = 3 minutes with a GPU, 0.1 without)
#   TOP        how many bottleneck kernels to extract (default 3 without a GPU, 5 with one)
#   BACKEND    triton | cuda (default triton)
# Extra arguments go to `autokernel loop` (e.g. --max-experiments 10, --agent llm --llm-model M).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -x .venv/bin/python ]]; then
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi

if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  MODEL="${MODEL:-llama}"
  TOP="${TOP:-5}"
  HOURS="${HOURS:-0.05}"
else
  MODEL="${MODEL:-llama-tiny}"
  TOP="${TOP:-3}"
  HOURS="${HOURS:-0.1}"  # the interpreter is slow: the starting points alone take minutes
  export TRITON_INTERPRET=1
  echo "main_job: NO CUDA GPU: interpreter mode (TRITON_INTERPRET=1) on the tiny preset $MODEL with its tiny shapes."
  echo "main_job: kernels run on the CPU, correctly but slowly; the loop ranks candidates by CPU wall-clock"
  echo "main_job: time under the interpreter. These are NOT GPU timings and say nothing about GPU speed."
fi
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
  # the loop profiles and extracts when the store has nothing for the model, then verifies
  ak loop --model "$MODEL" --hours "$HOURS" --top "$TOP" --backend "$BACKEND" --agent search "$@"
else
  if has profile; then ak profile --model "$MODEL"; fi
  if has extract; then ak extract --top "$TOP" --backend "$BACKEND"; fi
  if has verify; then ak verify; fi
fi
# the reports go to files, quietly (their messages shown only on a failure): the loop's recap
# above stays the last screen
home="${AUTOKERNEL_HOME:-.autokernel}"
report() {
  local said
  if ! said="$(python -m autokernel report "$@" 2>&1)"; then
    echo "$said" >&2
    return 1
  fi
}
report --format md --output "$home/report.md"
report --format tsv --output "$home/results.tsv"
echo "main_job: reports written to $home/report.md and $home/results.tsv"
