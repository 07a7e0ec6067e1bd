#!/usr/bin/env bash
# Official KernelBench levels 1-3 on one GPU within one device call, resumable over later calls
# (benchmarks/kb_levels.py does the work). Where the call's time goes, in order:
#   1. the shard's problems (every N-th, KB_SHARD=I/N) without a start yet:
#      a. baselines: their reference Models compiled by KB_COMPILE_WORKERS processes side by side
#         (default half the cores, at most 8) into one inductor/Triton cache, then, after the last
#         of them exited, eager and torch.compile timed one problem at a time by one trusted process
#         (its compile a cache hit), each saved to the state; stops at KB_BASELINES_DEADLINE seconds
#         (default KB_DEADLINE);
#      b. starts only (no search), each judge using the stored baselines instead of timing its own,
#         until KB_DEADLINE seconds; the search stays open for a later call;
#   2. the search (-k KB_K) on a few chosen problems (KB_SEARCH, e.g. L1.42,L2.76), its own baselines
#      first for those not started yet, until KB_SEARCH_DEADLINE seconds (KB_SEARCH= skips it).
# Measured (H100, 2026-12-06, KB_SHARD=0/10: 25 problems of levels 1-3, KB_DEADLINE=330): the 25
# references compiled by 8 processes in 38 s, their eager and compile timed in ~100 s (0.6-18 s
# each), then 21 starts judged in 248 s (2.3-70 s each) before the deadline: ~400 s a call.
# What this saves per problem (estimate from the code paths, see kb_levels.py's docstring): the
# judge's cold, serial torch.compile of the reference (10-40 s of CPU each, the GPU idle) becomes
# 1/N of it in the parallel phase plus a cache hit in the timing process, and a later call's search
# pays no baselines at all (they are in the state).
# The states are written to $OUT after every phase (kb_state_I_N.json, kb_state_search.json); those of
# an earlier call are taken from $KB_STATE_DIR first. Its default, benchmarks/kb_state/<GPU name>/, is
# in the repository: the campaign over whole levels takes more device calls than one session has,
# and a session's machine keeps nothing, so copy the returned files there and commit them (small
# JSON: per problem its numbers, no code). One folder per GPU model, so that an H100's numbers never
# join an H200's tables. The tables need no GPU:
#   d=benchmarks/kb_state/NVIDIA_H200
#   python benchmarks/kb_levels.py --kb-path .kb/KernelBench/KernelBench --levels 1 2 3 --write-only \
#       --state /tmp/kb_state_all.json --merge $d/kb_state_*_*.json $d/kb_state_search.json
#
#   OUT=./kb_out bash benchmarks/kb_levels.sh      # on the GPU machine: wheels from .whl via scripts/gpu.sh
# A device call of ~400 s (carry .whl and the KernelBench checkout's problem folder), then copy
# $OUT/kb_state_1_10.json into benchmarks/kb_state/<GPU name>/ and commit it:
#   KB_SHARD=1/10 KB_SEARCH= KB_DEADLINE=330 KB_BASELINES_DEADLINE=200 KB_TIMEOUT=120 \
#       timeout 420 bash benchmarks/kb_levels.sh
set -u
OUT=${OUT:-./kb_out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KB=${KB_PATH:-.kb/KernelBench/KernelBench}
SHARD=${KB_SHARD:-0/5}
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpu_name=${gpu_name:-cpu}
STATE_DIR=${KB_STATE_DIR:-benchmarks/kb_state/$(echo "$gpu_name" | tr -c 'A-Za-z0-9.\n-' '_')}
SEARCH=${KB_SEARCH-L1.42,L2.76}
if [ -n "${PYTHON:-}" ]; then RUN=("$PYTHON")
elif ls .whl/*.whl > /dev/null 2>&1; then RUN=(bash scripts/gpu.sh python3)
else RUN=(python3); fi
TABLES=$(mktemp)  # the tables are written from the states later, with all shards merged
RUN+=(benchmarks/kb_levels.py --kb-path "$KB" --timeout "${KB_TIMEOUT:-240}" --results "$TABLES")
export PYTHONUNBUFFERED=1

echo "kb_levels.sh: states from $STATE_DIR (copy $OUT/kb_state_*.json back there)"
cp "$STATE_DIR"/kb_state_*.json "$OUT"/ 2>/dev/null
command -v nvidia-smi > /dev/null && nvidia-smi -L
CW=()  # KB_COMPILE_WORKERS unset: kb_levels.py picks from the cores
[ -z "${KB_COMPILE_WORKERS:-}" ] || CW=(--compile-workers "$KB_COMPILE_WORKERS")
"${RUN[@]}" --levels 1 2 3 --shard "$SHARD" --search none --state "$OUT/kb_state_${SHARD/\//_}.json" \
    --deadline "${KB_DEADLINE:-270}" --baselines-deadline "${KB_BASELINES_DEADLINE:-${KB_DEADLINE:-270}}" \
    ${CW[@]+"${CW[@]}"} 2>&1 | tee "$OUT/kb_starts.log"
if [ -n "$SEARCH" ]; then
  "${RUN[@]}" --problems "$SEARCH" --search all -k "${KB_K:-3}" --state "$OUT/kb_state_search.json" \
      --deadline "${KB_SEARCH_DEADLINE:-90}" ${CW[@]+"${CW[@]}"} 2>&1 | tee "$OUT/kb_search.log"
fi
rm -f "$TABLES"
ls -l "$OUT"
