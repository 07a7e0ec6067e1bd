#!/usr/bin/env bash
# The GPU tests in groups, one pytest per file, each in a time box, within one device call.
#
#   bash scripts/gpu_tests.sh judge_rest loop     # groups in the order given
#   BUDGET_S=540 FILE_S=150 bash scripts/gpu_tests.sh judge
#
# Groups: judge (the profiled call's guards, the anti-cheat cost, the planted cheats: ~9 minutes on the
# H100), judge_rest (timing, refill, the KB judge, baselines, the isolated verify, the sandbox),
# loop (the screen and a short loop), kernels (every kernel type's GPU tests), kb (the generated
# KernelBench starts), apply (custom ops under torch.compile, the launcher), mlp (the fused_mlp starter's
# GPU tests and the Hopper GEMM tests: its persistent default and gate/up orders). A file's box is FILE_S
# seconds (default 150), cut short by what is left of BUDGET_S (default 560) for the whole call: a
# device call has a hard limit, and whatever ran must come back with its reasons. Logs go to $OUT
# (default ./out). An item FILE@S gets a box of S seconds instead; FILE%all runs all of the file's
# tests, not only those marked gpu (the sandbox's, which must hold on the GPU machine too). One log
# per file, listing its tests one a line with their times (a cut run still shows what passed), summary.txt (one line
# per file), failures.txt (each failure's
# report as it happens, through tests/conftest.py), gpu.txt (the card and versions).
# Needs the wheels (scripts/gpu.sh); run on the GPU machine from the repo root. PYTEST overrides how
# pytest is started (default `bash scripts/gpu.sh pytest`; in a set-up venv, `python -m pytest`).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
BUDGET_S="${BUDGET_S:-560}"
FILE_S="${FILE_S:-150}"
read -r -a PYTEST <<< "${PYTEST:-bash scripts/gpu.sh pytest}"
export AUTOKERNEL_TEST_FAILURES="$OUT/failures.txt"
T0=$SECONDS

declare -A SETS=(
  [judge]="tests/test_bench_timing.py@60 tests/test_judge_guards.py@90 tests/test_cheats.py::anticheat tests/test_cheats.py@480"
  [judge_rest]="tests/test_bench_timing.py tests/test_refill.py tests/test_kb.py tests/test_kb_baselines.py
                tests/test_bench_baselines.py tests/test_bench_gpu.py tests/test_verify_isolated.py
                tests/test_sandbox.py%all"
  [loop]="tests/test_screening_gpu.py@300 tests/test_pool.py"
  [kernels]="$(ls tests/test_kernels_*.py 2>/dev/null | tr '\n' ' ')"
  [kb]="tests/test_kb_ops_gpu.py"
  [apply]="tests/test_apply_gpu.py tests/test_launcher.py"
  [mlp]="tests/test_kernels_fused_mlp.py@300 tests/test_matmul_hopper.py@240"
)

if [[ $# -eq 0 ]]; then
  echo "usage: bash scripts/gpu_tests.sh GROUP... (groups: ${!SETS[*]})" >&2
  exit 2
fi
for g in "$@"; do
  if [[ -z "${SETS[$g]+x}" ]]; then
    echo "gpu_tests.sh: no group '$g' (groups: ${!SETS[*]})" >&2
    exit 2
  fi
done

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" 2>&1
} > "$OUT/gpu.txt"

status=0
for g in "$@"; do
  for item in ${SETS[$g]}; do
    left=$(( BUDGET_S - (SECONDS - T0) ))
    if (( left < 20 )); then
      echo "$item: not run (the call's budget is spent)" | tee -a "$OUT/summary.txt"
      status=1
      continue
    fi
    want=$FILE_S
    marker=(-m gpu)
    if [[ "$item" == *%all ]]; then
      marker=()
      item="${item%\%all}"
    fi
    if [[ "$item" == *@* ]]; then
      want="${item##*@}"
      item="${item%@*}"
    fi
    box=$(( left < want ? left : want ))
    file="${item%%::*}"
    select=(-k "not anticheat")
    [[ "$item" == *::anticheat ]] && select=(-s -k anticheat)
    [[ "$file" != tests/test_cheats.py ]] && select=()
    name="$(basename "$file" .py)${item#"$file"}"
    name="${name//::/-}"
    started=$SECONDS
    # times: each test's seconds on its line, so a call cut short still shows where its time went
    timeout "$box" "${PYTEST[@]}" -v -o console_output_style=times -p no:cacheprovider "${marker[@]}" -rfE --tb=short \
      --timeout="$box" "${select[@]}" "$file" > "$OUT/$name.log" 2>&1
    rc=$?
    last="$(grep -E '(passed|failed|error|skipped|deselected|no tests ran)' "$OUT/$name.log" | tail -1)"
    (( rc == 124 )) && last="cut at ${box} s: ${last:-nothing reported}"
    echo "$name: rc=$rc in $(( SECONDS - started )) s: ${last:-see $name.log}" | tee -a "$OUT/summary.txt"
    (( rc == 0 || rc == 5 )) || status=1  # 5: no GPU test in that file
  done
done
exit $status
