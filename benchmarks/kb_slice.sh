#!/usr/bin/env bash
# KernelBench slice on one GPU (H200): `autokernel kb run` on levels 1 and 2 of the autokernel
# sample problems (10 each; NOT the official KernelBench set), a few search experiments per
# problem, then `kb score --json` and a markdown summary into $OUT.
#
#   OUT=./kb_out bash benchmarks/kb_slice.sh          # ~7 minutes with the defaults
#
# Knobs (environment): KB_SOURCE (sample | checkout | hf; a checkout needs KERNELBENCH_PATH),
# KB_LEVELS ("1 2"), KB_PROBLEMS (ids, e.g. 1,2,3; default all), KB_EXPERIMENTS (per problem, 2),
# KB_HOURS_PER_LEVEL (0.05 = 3 min of judged time per level), KB_TIMEOUT (s per judgement, 120),
# KB_SIZE (default | tiny: the sample problems scaled down, for a CPU smoke run of this script),
# PYTHON (python of the venv), AUTOKERNEL_HOME (default $OUT/home: a fresh store per slice).
# Robust: a problem that fails is recorded and the run goes on; a level whose run fails does not
# stop the other level or the score.
set -u
OUT=${OUT:-./kb_out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export AUTOKERNEL_HOME=${AUTOKERNEL_HOME:-$OUT/home}
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python; fi
fi
SOURCE=${KB_SOURCE:-sample}
LEVELS=${KB_LEVELS:-"1 2"}
K=${KB_EXPERIMENTS:-2}
HOURS=${KB_HOURS_PER_LEVEL:-0.05}
TIMEOUT=${KB_TIMEOUT:-120}
SIZE=${KB_SIZE:-default}
PROBLEMS=()
if [ -n "${KB_PROBLEMS:-}" ]; then PROBLEMS=(--problems "$KB_PROBLEMS"); fi

echo "kb slice: source=$SOURCE size=$SIZE levels=$LEVELS experiments/problem=$K hours/level=$HOURS home=$AUTOKERNEL_HOME out=$OUT"
"$PY" -c "import torch; print('device:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU (no GPU: interpreter, CPU timings)')" | tee "$OUT/device.txt"
: > "$OUT/errors.txt"
start=$(date +%s)
for level in $LEVELS; do
  t0=$(date +%s)
  "$PY" -m autokernel kb run --level "$level" --source "$SOURCE" --size "$SIZE" "${PROBLEMS[@]}" \
      --experiments-per-problem "$K" --hours "$HOURS" --timeout "$TIMEOUT" --json \
      > "$OUT/run_L$level.json" 2> "$OUT/run_L$level.log"
  rc=$?
  echo "level $level: kb run exit $rc in $(( $(date +%s) - t0 )) s"
  if [ $rc -ne 0 ]; then
    echo "level $level: kb run exited with $rc (see run_L$level.log)" >> "$OUT/errors.txt"
    tail -5 "$OUT/run_L$level.log"
  fi
done
"$PY" -m autokernel kb score --json --export "$OUT/solutions" > "$OUT/score.json" 2>> "$OUT/errors.txt" \
  || echo "kb score --json failed" >> "$OUT/errors.txt"
{
  echo "## KernelBench slice ($(date -u +%Y-%m-%d), $(cat "$OUT/device.txt"))"
  echo
  echo "Levels $LEVELS, source $SOURCE, $K search experiment(s) per problem, $HOURS h of judged time per level."
  echo
  "$PY" -m autokernel kb score --markdown 2>> "$OUT/errors.txt" || echo "(kb score failed: see errors.txt)"
} > "$OUT/summary.md"
echo "done in $(( $(date +%s) - start )) s: $OUT/score.json, $OUT/summary.md, $OUT/solutions/"
cat "$OUT/summary.md"
[ -s "$OUT/errors.txt" ] && { echo "errors:"; cat "$OUT/errors.txt"; }
exit 0
