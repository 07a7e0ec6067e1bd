#!/usr/bin/env bash
# Official KernelBench levels 1-3 on one GPU within one device call, resumable over later calls
# (benchmarks/kb_levels.py does the work):
#   1. starts only (no search) for a spread of the levels: every N-th problem (KB_SHARD=I/N) until
#      KB_DEADLINE seconds; the search stays open for a later call;
#   2. the search (-k KB_K) on a few chosen problems (KB_SEARCH, e.g. L1.42,L2.76) until
#      KB_SEARCH_DEADLINE seconds (KB_SEARCH= skips it).
# The states are written to $OUT after every phase (kb_state_I_N.json, kb_state_search.json); those of
# an earlier call are taken from $KB_STATE_DIR (default .state) first, so copy the returned files
# there (and carry that folder) before the next call. The tables need no GPU:
#   python benchmarks/kb_levels.py --kb-path .kb/KernelBench/KernelBench --levels 1 2 3 --write-only \
#       --state .state/kb_state_all.json --merge .state/kb_state_*_*.json .state/kb_state_search.json
#
#   OUT=./kb_out bash benchmarks/kb_levels.sh      # on the GPU machine: wheels from .whl via scripts/gpu.sh
set -u
OUT=${OUT:-./kb_out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KB=${KB_PATH:-.kb/KernelBench/KernelBench}
SHARD=${KB_SHARD:-0/5}
STATE_DIR=${KB_STATE_DIR:-.state}
SEARCH=${KB_SEARCH-L1.42,L2.76}
if [ -n "${PYTHON:-}" ]; then RUN=("$PYTHON")
elif ls .whl/*.whl > /dev/null 2>&1; then RUN=(bash scripts/gpu.sh python3)
else RUN=(python3); fi
TABLES=$(mktemp)  # the tables are written from the states later, with all shards merged
RUN+=(benchmarks/kb_levels.py --kb-path "$KB" --timeout "${KB_TIMEOUT:-240}" --results "$TABLES")
export PYTHONUNBUFFERED=1

cp "$STATE_DIR"/kb_state_*.json "$OUT"/ 2>/dev/null
command -v nvidia-smi > /dev/null && nvidia-smi -L
"${RUN[@]}" --levels 1 2 3 --shard "$SHARD" --search none --state "$OUT/kb_state_${SHARD/\//_}.json" \
    --deadline "${KB_DEADLINE:-270}" 2>&1 | tee "$OUT/kb_starts.log"
if [ -n "$SEARCH" ]; then
  "${RUN[@]}" --problems "$SEARCH" --search all -k "${KB_K:-3}" --state "$OUT/kb_state_search.json" \
      --deadline "${KB_SEARCH_DEADLINE:-90}" 2>&1 | tee "$OUT/kb_search.log"
fi
rm -f "$TABLES"
ls -l "$OUT"
