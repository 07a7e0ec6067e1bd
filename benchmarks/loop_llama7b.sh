#!/usr/bin/env bash
# `autokernel loop --model llama-7b --agent search` on one H200, then verify; appends per-kernel
# speed-ups, the verified end-to-end speed-up vs eager and vs torch.compile, experiments per hour
# and the median seconds per experiment to benchmarks/RESULTS.md (and copies everything to $OUT).
#
# Meant to fit a 10-minute command: the loop gets HOURS (default 0.09 = 5.4 min, baselines
# included; the first profile and extract come before it, verify after it). State lives in
# AUTOKERNEL_HOME (default ./.autokernel-llama7b), so
#   RESUME=1 HOURS=0.2 bash benchmarks/loop_llama7b.sh
# resumes the latest llama-7b loop run, cut off or finished (HOURS is the run's total: time
# already spent counts), and then verifies.
#
# A loop longer than one command, on machines that do not outlive a command: SAVE_STATE=1 packs
# AUTOKERNEL_HOME into $OUT/state.tgz at the end; put that file in the repo (e.g. .state/, which
# git ignores), carry it, and RESTORE_STATE=.state/state.tgz unpacks it before RESUME=1 resumes:
#   call 1: SAVE_STATE=1 HOURS=0.12 bash benchmarks/loop_llama7b.sh --top 4
#   call 2: RESTORE_STATE=.state/state.tgz RESUME=1 SAVE_STATE=1 HOURS=0.2 bash benchmarks/loop_llama7b.sh
# Keep HOURS inside the command's limit (profile, extract and verify take ~2 min besides).
# PHASE=loop stops after the loop (no verify, no RESULTS.md lines): for a first call whose state
# a second call resumes and verifies.
#
#   source .whl/prelude.sh || exit 1; bash benchmarks/loop_llama7b.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export AUTOKERNEL_HOME="${AUTOKERNEL_HOME:-$PWD/.autokernel-llama7b}"
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
HOURS="${HOURS:-0.09}"
PHASE="${PHASE:-all}"
PY="${PYTHON:-python3}"
ak() { echo "+ autokernel $*" >&2; "$PY" -m autokernel "$@"; }
save_state() {
  [[ "${SAVE_STATE:-0}" == 1 && -d "$AUTOKERNEL_HOME" ]] || return 0
  tar -C "$(dirname "$AUTOKERNEL_HOME")" -czf "$OUT/state.tgz" "$(basename "$AUTOKERNEL_HOME")"
}
trap save_state EXIT
trap 'exit 143' TERM  # so a `timeout` around this script still packs the state (after the child ends)
if [[ -n "${RESTORE_STATE:-}" ]]; then
  mkdir -p "$(dirname "$AUTOKERNEL_HOME")"
  tar -C "$(dirname "$AUTOKERNEL_HOME")" -xzf "$RESTORE_STATE"
fi

# EXTRACT_TOP=N: extract the profile's top N kernels into the (restored) store before the loop, so a
# resumed run takes on kernels its first call left out (the attention's route, say, which verify uses
# only for a kernel the run has)
if [[ -n "${EXTRACT_TOP:-}" ]]; then
  ak extract --top "$EXTRACT_TOP" >&2
fi

last_run="$("$PY" - <<'PY'
import os
from autokernel.config import resolve_home
from autokernel.store import Store
p = resolve_home()
if p.db.exists():
    r = Store(p.db).latest_run("loop", "llama-7b")
    print(r.id if r else "")
PY
)"
# (PHASE=verify skips the loop and verifies the run in $OUT/loop.json, or else the latest one)
if [[ "$PHASE" != verify ]]; then
  if [[ "${RESUME:-0}" == 1 && -n "$last_run" ]]; then
    ak loop --resume "$last_run" --hours "$HOURS" --no-verify --json "$@" | tee "$OUT/loop.json"
  else
    ak loop --model llama-7b --agent search --hours "$HOURS" --batch 1 --seq 2048 --dtype bf16 \
      --no-verify --json "$@" | tee "$OUT/loop.json"
  fi
fi
[[ "$PHASE" == loop ]] && exit 0
if [[ -f "$OUT/loop.json" ]]; then
  run_id="$("$PY" -c "import json;print(json.load(open('$OUT/loop.json'))['run_id'])")"
else  # PHASE=verify in a fresh $OUT (a restored state): the latest llama-7b loop run, its summary re-made
  [[ -n "$last_run" ]] || { echo "loop_llama7b.sh: no llama-7b loop run to verify in $AUTOKERNEL_HOME" >&2; exit 2; }
  run_id="$last_run"
  ak loop --resume "$run_id" --hours 0.001 --no-verify --json | tee "$OUT/loop.json"  # spent: no experiment
fi
# Verify times the issue's workload only (VERIFY_WORKLOADS, space-separated; "all" for every default
# workload): all five LLaMA-7B workloads in three modes take two 10-minute calls on an H200, and the
# first verify that tried them in one call was cut off after 400 s.
wl=()
[[ "${VERIFY_WORKLOADS:-prefill:1x2048}" == all ]] || for w in ${VERIFY_WORKLOADS:-prefill:1x2048}; do wl+=(--workload "$w"); done
# --include-slower (VERIFY_ARGS to change it): the workload timing decides per mode and shape, by
# measurement, which kernels go in; without it a kernel slower than eager alone never reaches it, and
# neither does its route (flash_attention's lets a plain causal prefill take SDPA's is_causal path).
# --routes-apart times each compiled mode with the routes alone as well, so the results say how much of
# the compiled gain is the route's and how much the kernels' (one more compile per mode, ~30 s each)
read -r -a vargs <<< "${VERIFY_ARGS---include-slower --routes-apart}"
ak verify --run "$run_id" "${wl[@]}" "${vargs[@]}" --json | tee "$OUT/verify.json" || true
ak report --run "$run_id" --format tsv --output "$OUT/results.tsv" || true
ak report --run "$run_id" --format md --output "$OUT/report.md" --plot "$OUT/progress.png" || true

"$PY" - "$OUT/loop.json" "$OUT/verify.json" benchmarks/RESULTS.md <<'PY'
import datetime as dt
import json
import sys

loop = json.load(open(sys.argv[1]))
try:
    ver = json.load(open(sys.argv[2]))
except Exception as exc:  # verify failed: say so in the results rather than inventing numbers
    ver = {"error": f"verify gave no JSON: {exc}"}
hours = loop["elapsed_s"] / 3600 if loop["elapsed_s"] else 0
lines = [f"\n## autokernel loop, llama-7b, search agent ({dt.date.today()}, run {loop['run_id']})\n",
         f"{loop['experiments']} experiments ({loop['kept']} kept) in {loop['elapsed_s'] / 60:.1f} min: "
         f"{loop['experiments'] / hours if hours else 0:.0f} experiments/hour, median "
         f"{loop['median_experiment_s'] or 0:.1f} s per experiment; stopped: {loop['stop_reason']}.",
         f"Screen: {loop.get('screened_out', 0)} of {loop.get('screened', 0)} screened candidates stopped before "
         f"the full judgement, median {loop.get('median_screen_s') or 0:.2f} s each (the report counts those "
         f"3x slower than the best).\n",
         "| kernel | share | baseline us | best us | x starter | x eager | x library | % roofline | experiments "
         "| kept | screened out |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
fmt = lambda v, f=".2f": "-" if v is None else format(v, f)
for k in loop["kernels"]:
    vs_eager = k["speedup"] if k["speedup"] != k["speedup_vs_baseline"] else None
    lines.append(f"| {k['name']} | {100 * k['share']:.1f}% | {fmt(k['baseline_us'])} | {fmt(k['best_us'])} | "
                 f"{k['speedup_vs_baseline']:.3f} | {fmt(vs_eager)} | {fmt(k.get('vs_library'))} | "
                 f"{fmt(k['pct_peak'], '.1f')} | {k['attempts']} | {k['kept']} | "
                 f"{k.get('screened_out', 0)}/{k.get('screened', 0)} |")
lines.append(f"\nAmdahl prediction from the kernels: {loop['predicted_speedup']:.3f}x.")
if "error" in ver:
    lines.append(f"Verify: {ver['error']}")
else:
    lines.append(f"Verified end to end (outputs match: {ver.get('ok')}): eager {fmt(ver.get('eager_ms'))} ms, "
                 f"with AutoKernel {fmt(ver.get('plugged_ms'))} ms, torch.compile {fmt(ver.get('compile_ms'))} ms; "
                 f"speed-up {fmt(ver.get('speedup_vs_eager'), '.3f')}x vs eager, "
                 f"{fmt(ver.get('speedup_vs_compile'), '.3f')}x vs torch.compile"
                 + (f"; left out: {', '.join(ver['failed'])}" if ver.get("failed") else "")
                 + (f"; correct but not faster than eager, left out: {', '.join(ver['slower'])}"
                    if ver.get("slower") else "") + ".")
    for w in ver.get("workloads") or []:
        alone = [f"{r['mode']} {r['routes_only']['ms']:.3f} ms (without {r['without']['ms']:.3f}, with "
                 f"{r['with_']['ms']:.3f}; rel. error {fmt(r.get('routes_rel_error'), '.2g')})"
                 for r in w.get("rows") or [] if r.get("routes_only")]
        if alone:
            lines.append(f"{w['workload']}, the routes alone (every kernel declining): {'; '.join(alone)}.")
    if ver.get("eager_error") is not None:
        lines.append(f"Outputs vs an fp32 copy of the model: relative error {fmt(ver.get('rel_error'), '.3g')} "
                     f"(eager bf16 itself: {fmt(ver.get('eager_error'), '.3g')}; tolerance "
                     f"{fmt(ver.get('tolerance'), '.3g')}).")
text = "\n".join(lines) + "\n"
with open(sys.argv[3], "a") as f:
    f.write(text)
print(text)
PY
cp benchmarks/RESULTS.md "$OUT/RESULTS.md"
