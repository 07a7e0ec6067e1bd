"""What every KernelBench problem's generated start is, checked on the CPU.

For each problem of the chosen levels (an official checkout: --kb-path or $KERNELBENCH_PATH):
1. the start autokernel writes for it (solutions.initial_solution): torch-only (the judge's
   own-kernel check would reject it) or launching kernels of its own, and which;
2. a smaller instance of the problem (autokernel/kb/shrink.py: module-level sizes above a cap
   reduced, residues kept) whose reference still runs on the CPU and whose generated start is
   built from the same ops as the full-size one (the same replaced and kept ops); the mildest
   cap is tried last, then the problem as it is;
3. that instance judged by the KernelBench judge itself (autokernel.kb.evaluate.KBWorker: 5 trials
   on fresh inputs, fp32 atol = rtol = 1e-4, the own-kernel check, NaN-poisoned outputs) without
   timing, under the Triton interpreter, and every kernel it launched lowered to Triton IR for
   sm_90 (the judge's gpu-compile stage).

State is a JSON file, written after every problem; a second run with the same --state goes on
where the first stopped (--redo judges again). The summary (per level: problems, torch-only
starts, correct, incorrect, compile errors, crashes) is printed and, with --markdown, written.

    TRITON_INTERPRET=1 python benchmarks/kb_starts.py --kb-path ../KernelBench --levels 1 2 3 \\
        --state kb_starts.json --markdown kb_starts.md
    python benchmarks/kb_starts.py --state kb_starts.json --summary     # the table only
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
try:  # the autokernel on PYTHONPATH (another checkout's, for a before/after comparison), else this one
    import autokernel  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MAX_INPUT_ELEMS = 32 * 2**20  # a candidate whose inputs are larger is not run on the CPU


class _NoWorker:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class _Slow(Exception):
    pass


def _alarm(*_):
    raise _Slow()


def signature(sol) -> tuple:
    """What a start is built from, independent of sizes."""
    return sol.kind, sol.library, tuple(sorted(sol.replaced)), tuple(sorted(set(sol.kept)))


def reference_runs(problem, limit_s: float) -> str | None:
    """None when the problem's reference runs on the CPU within limit_s, else why not."""
    import torch

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(limit_s))
    try:
        mod = problem.load_module()
        with torch.device("meta"):
            meta = [a for a in mod.get_inputs() if isinstance(a, torch.Tensor)]
        elems = sum(a.numel() for a in meta)
        if elems > MAX_INPUT_ELEMS:
            return f"inputs of {elems / 2**20:.0f} M elements"
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs())
        with torch.no_grad():
            model(*mod.get_inputs())
        return None
    except _Slow:
        return f"reference slower than {limit_s:.0f} s on the CPU"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pick_instance(problem, full_sig, limit_s: float):
    """(instance, its start, {name: (old, new)}, note): the smallest instance that keeps the start's ops."""
    from autokernel.kb.shrink import shrink_candidates
    from autokernel.kb.solutions import initial_solution

    notes = []
    for cand, changed in shrink_candidates(problem):
        sol = initial_solution(cand)
        if signature(sol) != full_sig:
            notes.append(f"{cand.size}: a different start")
            continue
        why = reference_runs(cand, limit_s)
        if why is None:
            return cand, sol, changed, "; ".join(notes)
        notes.append(f"{cand.size or 'as is'}: {why}")
    return None, None, {}, "; ".join(notes)


def scan_problem(worker, problem, timeout_s: float, judge: bool = True) -> dict:
    from autokernel.kb.solutions import KIND_TORCH, initial_solution

    t0 = time.monotonic()
    full = initial_solution(problem)
    row = {"level": problem.level, "id": problem.problem_id, "name": problem.name, "kind": full.kind,
           "torch_only": full.kind == KIND_TORCH, "library": full.library, "describe": full.describe()[:300],
           "note": full.note[:200]}
    if not judge:
        row.update(outcome="torch-only" if row["torch_only"] else "not-run", seconds=round(time.monotonic() - t0, 1))
        return row
    inst, sol, changed, note = pick_instance(problem, signature(full), limit_s=min(120.0, timeout_s))
    row["shrink"] = {k: list(v) if isinstance(v, tuple) else v for k, v in changed.items()}
    row["instance"] = (inst.size if inst is not problem else "as is") if inst is not None else None
    row["shrink_note"] = note[:300]
    if inst is None:
        row.update(outcome="not-run", error="no instance runs on the CPU: " + note[:200])
    else:
        res = worker.evaluate(inst, sol.source, timing=False, gpu_compile=True, timeout_s=timeout_s)
        row.update(outcome=res.outcome, error=(res.error or "")[:400], launched=res.launched_kernels[:8],
                   max_abs_err=(res.extra or {}).get("max_abs_err"), degenerate=(res.extra or {}).get("degenerate"))
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def summary(state: dict) -> str:
    levels = sorted({r["level"] for r in state.values()})
    lines = ["| level | problems | torch-only | correct | incorrect | compile error | crashed / timed out | not run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    # a torch-only start is judged too: the own-kernel check rejects it ("cheat"), counted under torch-only
    for lv in levels:
        rows = [r for r in state.values() if r["level"] == lv]
        count = lambda *o: sum(1 for r in rows if r["outcome"] in o)  # noqa: E731
        lines.append(f"| {lv} | {len(rows)} | {sum(r['torch_only'] for r in rows)} | {count('correct')} | "
                     f"{count('incorrect')} | {count('compile_error')} | {count('crashed', 'timeout', 'oom')} | "
                     f"{count('not-run')} |")
    bad = sorted((r for r in state.values() if r["outcome"] != "correct"), key=lambda r: (r["level"], r["id"]))
    if bad:
        lines += ["", "| level | id | name | start | outcome | error |", "|---|---:|---|---|---|---|"]
        for r in bad:
            err = (r.get("error") or r.get("note") or "").replace("|", "/").replace("\n", " ")[:160]
            err = f"degenerate: {r['degenerate']}; {err}" if r.get("degenerate") else err
            lines.append(f"| {r['level']} | {r['id']} | {r['name']} | {r['kind']} | {r['outcome']} | {err} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kb-path", default=os.environ.get("KERNELBENCH_PATH"))
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--problems", default="", help="ids, comma-separated (default: all)")
    ap.add_argument("--state", default="kb_starts.json")
    ap.add_argument("--markdown", default=None, help="write the summary here too")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per judgement")
    ap.add_argument("--deadline", type=float, default=None, help="stop starting problems after this many seconds")
    ap.add_argument("--redo", action="store_true", help="judge problems already in the state again")
    ap.add_argument("--summary", action="store_true", help="print the summary of the state file and stop")
    ap.add_argument("--kinds-only", action="store_true", help="only which start each problem gets (no judging)")
    args = ap.parse_args(argv)
    state_path = Path(args.state)
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    if not args.summary:
        from autokernel.kb.evaluate import KBWorker
        from autokernel.kb.problems import load_problems

        ids = [int(i) for i in args.problems.split(",") if i] or None
        start = time.monotonic()
        with KBWorker() if not args.kinds_only else _NoWorker() as worker:
            for lv in args.levels:
                for p in load_problems("checkout", args.kb_path, level=lv, ids=ids):
                    key = f"L{lv}.{p.problem_id}"
                    if key in state and not args.redo:
                        continue
                    if args.deadline is not None and time.monotonic() - start >= args.deadline:
                        print("deadline reached", flush=True)
                        break
                    try:
                        row = scan_problem(worker, p, args.timeout, judge=not args.kinds_only)
                    except Exception as exc:  # the generator itself failing is a finding, not a stop
                        row = {"level": lv, "id": p.problem_id, "name": p.name, "kind": "?", "torch_only": False,
                               "outcome": "not-run", "error": f"scan: {type(exc).__name__}: {exc}"[:400]}
                    state[key] = row
                    state_path.write_text(json.dumps(state, indent=1, sort_keys=True))
                    print(f"{key} {p.name}: {row['kind']} {row['outcome']} ({row.get('instance')}, "
                          f"{row.get('seconds')} s) {(row.get('error') or '')[:120]}", flush=True)
    text = summary(state)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
