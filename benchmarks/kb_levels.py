"""Whole KernelBench levels on the GPU, across several device calls: every problem's start judged,
then the loop's search experiments (`-k`) on the problems worth it, and the tables written into
benchmarks/RESULTS.md.

First, for the problems of this call whose start is still to come, "baselines" (kb/baselines.py;
--no-baselines leaves it out): the eager and torch.compile times of each problem's reference Model,
measured by the trusted harness rather than in the judge's candidate process:
  a. compile: --compile-workers processes (default half the cores, at most 8) compile the
     references side by side, one problem per process at a time, into one inductor/Triton cache
     under --home; nothing is timed meanwhile (GPU only: the CPU timing has no compile baseline).
     A compile that fails (an inductor error, out of memory, a dead process) is recorded as that
     problem's baselines_error and the runner goes on: its judge times its own, as before;
  b. timing: once the last compile process has exited (the phases are ordered, no lock), one
     process times each problem alone with the judge's own functions (kb/timing.py baselines_gpu:
     same inputs and seed, COMPILE_MODE, CUDA events, L2 flushed, median, eager and compile in one
     run, the device named), its torch.compile a hit in that cache. Kept per problem in the state
     ("baselines"), saved after each; the judge of its start and search uses them (for the same
     device key and compile mode only) and times no baseline itself. A problem started before
     (an older state) keeps its judge's own baselines for its search: one frame for its numbers.
Then per problem, in order (levels, then ids):
1. "start": `kb run -k 0` on it: the generated start judged as KernelBench times it (correctness on
   5 fresh inputs at fp32 1e-4, CUDA events; eager and torch.compile from the baselines phase, or
   timed in the judge's process where there are none);
2. "search": when the start is correct and `--search` says so (all | slower: its speed-up over
   torch.compile is below --search-below | none: left for a later call), `kb run -k K` on it; the
   best kept row is the after-search number (the start itself when nothing beat it).

Where a device call's time goes, and what the baselines phase saves (an estimate from the code
paths, to be measured on the H200): without it, every problem's first judgement in a judge
process compiled its reference cold, serially, in the sandbox's own caches (10-40 s of CPU per
problem, the GPU idle), then timed eager and compile (2 x 100 trials); a search in a later device
call (a fresh judge process) paid that again. With it, the compiles of the shard run
--compile-workers at a time (wall time about their sum / N, plus one torch import and CUDA
context per process, once), and the timing process pays per problem only Dynamo's trace of the
reference again and the load of the cached graph and kernels (the FX graph and AOTAutograd caches
skip lowering, code generation and the Triton compile) before the same 2 x 100 trials; the
judges pay nothing for baselines, in this call or a later one (the state carries the numbers).
Per problem that is about compile x (1 - 1/N) saved, less the cache hit's own seconds: with N = 8
and 10-40 s compiles, some 7-32 s of a start's judgement, and all of a later search's baselines.

State is a JSON file written before and after every phase, so a device call that ends mid-phase
loses only that phase: the next call (same --state) goes on where it stopped; a phase started
twice without finishing is recorded as a timeout and skipped. --deadline S stops starting phases
S seconds after the start of this call (the baselines phase stops at --baselines-deadline, by
default the same; leave room for the slowest phase: torch.compile of a
level-3 network). The store lives in --home (a fresh one per call is fine: the state holds the
numbers).

Written each time (also to --out when given): the state, and a section of --results between
`<!-- kb-levels:begin -->` and `<!-- kb-levels:end -->`: per level the correctness, fast_p and
geomean vs eager and torch.compile after search, the per-problem table, and "what search adds"
(fast_p and geomean of the same problems before and after the experiments).

    python benchmarks/kb_levels.py --kb-path .kb/KernelBench --levels 1 2 3 -k 3 \\
        --state benchmarks/kb_levels_state.json --deadline 480 --out $OUT

--shard I/N also spreads a short call over all levels (every N-th problem: `--shard 0/5` is a fifth
of each level); the other shards follow in later calls, each with its own --state. On a host with
several GPUs, one process per GPU: `CUDA_VISIBLE_DEVICES=I ... --shard I/N --state
benchmarks/kb_levels_state.I.json --results /tmp/r.I.md`, then `--write-only --merge
benchmarks/kb_levels_state.*.json` writes the tables of all of them.
benchmarks/kb_levels.sh is one device call of it (starts of a shard, then a search on chosen problems).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

try:
    import autokernel  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BEGIN, END = "<!-- kb-levels:begin -->", "<!-- kb-levels:end -->"
P_SHOWN = ("0.0", "0.5", "1.0", "1.5", "2.0")


def row_numbers(e) -> dict:
    """The numbers of one experiment row."""
    return {"correct": e.correctness == "PASS", "status": e.status, "latency_us": e.latency_us,
            "eager_us": e.eager_us, "compile_us": e.compile_us, "speedup_vs_eager": e.speedup_vs_eager,
            "speedup_vs_compile": e.speedup_vs_compile, "flagged": bool(e.flagged), "device": e.device,
            "error": short_error(e.error)}


def short_error(text: str | None, head: int = 100, tail: int = 300) -> str | None:
    """An error for the state: its first line's start and its end (a traceback's end says what
    went wrong; its start only where)."""
    text = (text or "").strip()
    if len(text) <= head + tail + 5:
        return text or None
    return f"{text.splitlines()[0][:head]} ... {text[-tail:]}"


def phase(store, workspace, worker, problem, kb_path, k: int, timeout_s: float, hours: float,
          baselines: dict | None = None) -> dict:
    """`kb run` on one problem with k experiments: its start's numbers and the best kept row's.
    `baselines`: the problem's eager/compile times from the baselines phase, given to its judge."""
    from autokernel.kb.runner import kb_run

    failed = []  # what the run only says in its events: a problem or the proposer failing

    def on_event(ev) -> None:
        if ev.kind in ("problem_failed", "proposer_failed"):
            failed.append(ev.message)

    summary = kb_run(store, workspace, level=problem.level, ids=[problem.problem_id], source="checkout",
                     kb_path=kb_path, size="default", experiments_per_problem=k, hours=hours, agent="search",
                     timeout_s=timeout_s, worker=worker, on_event=on_event,
                     baselines={problem.kernel_name: baselines} if baselines else None)
    rows = [e for e in store.list_experiments(run_id=summary.run_id) if e.status != "abandoned"]
    base = next((e for e in rows if e.proposer == "baseline"), None)
    # after search: the fastest kept experiment; none kept, the start's own numbers stand (a second
    # timing of the same start is not counted as a change)
    kept = [e for e in rows if e.status == "kept" and e.correctness == "PASS" and e.latency_us]
    best = min(kept, key=lambda e: e.latency_us) if kept else None
    meta = summary.problems[0] if summary.problems else {}
    return {"start": row_numbers(base) if base else None, "best": row_numbers(best) if best else None,
            "kind": meta.get("start"), "degenerate": meta.get("degenerate"),
            "experiments": sum(1 for e in rows if e.proposer != "baseline"),
            "kept": sum(1 for e in rows if e.status == "kept"), "stop": summary.stop_reason,
            **({"error": "; ".join(failed)[:300]} if failed else {})}


def needs_baselines(entry: dict) -> bool:
    """A problem gets the harness's baselines before its start only: one whose start was judged
    without them keeps the judge's own for its search, so that its numbers before and after the
    search are in one frame."""
    return not entry.get("baselines_done") and not entry.get("start_done")


def baselines_phase(problems: list, state: dict, save, *, cache_dir: Path, workers: int,
                    deadline_at: float | None, worker=None) -> str:
    """The trusted harness's eager and torch.compile times of every problem in `problems` that has
    none yet (kb/baselines.py), into state["problems"][key]["baselines"]; returns what it did.
    On the GPU: first every reference compiled by `workers` processes side by side into the one
    cache `cache_dir` (a problem whose compile fails records the error and gets no baselines: its
    judge times its own, as without this phase), and only after the last compile process exited,
    each problem timed alone by one process (the `worker` given, or a new BaselineWorker), its
    compile a cache hit. The state is saved after every problem; nothing starts after
    `deadline_at` (time.monotonic()); a problem whose timing was started twice without finishing
    (a device call ended inside it) is given up like any phase of this runner."""
    from autokernel.errors import BenchError
    from autokernel.kb.baselines import BaselineWorker, compile_all

    entries = {p.kernel_name: state["problems"].setdefault(f"L{p.level}.{p.problem_id}", {
        "level": p.level, "id": p.problem_id, "name": p.name}) for p in problems}
    todo = [p for p in problems if needs_baselines(entries[p.kernel_name])]
    if not todo:
        return "baselines: none needed"
    late = lambda: deadline_at is not None and time.monotonic() >= deadline_at  # noqa: E731
    if late():
        return f"baselines: none, the deadline came first ({len(todo)} left for a later call)"
    timer = worker or BaselineWorker(cache_dir)
    compiled = failed = timed = 0
    try:
        try:
            device = timer.info.get("device")
        except BenchError as exc:  # the judges time their own, as without this phase
            return f"baselines: none, the trusted process did not start ({exc.one_line()})"
        if workers > 0 and device == "cuda" and not late():
            def compiled_one(p, reply) -> None:
                nonlocal compiled, failed
                e = entries[p.kernel_name]
                e["compile"] = {k: reply[k] for k in ("s", "cache", "error") if k in reply}
                if "error" in reply:
                    failed += 1
                    e["baselines_error"] = f"compile: {reply['error']}"[:300]
                    e["baselines_done"] = True  # its judge compiles and times its own
                else:
                    compiled += 1
                save()
                print(f"L{p.level}.{p.problem_id} compiled: {reply.get('error') or reply.get('s')}", flush=True)

            t = time.monotonic()
            compile_all(todo, cache_dir, workers, deadline=deadline_at, on_done=compiled_one)
            print(f"baselines: {compiled} compiled, {failed} failed by {workers} processes in "
                  f"{time.monotonic() - t:.0f} s", flush=True)
        for p in todo:  # every compile process has exited: this process has the GPU alone
            e = entries[p.kernel_name]
            if e.get("baselines_done"):
                continue
            if late():
                break
            tries = e.get("baselines_tries", 0)
            if tries >= 2:
                e["baselines_done"], e["baselines_error"] = True, "baselines did not finish within a device call (twice)"
                save()
                continue
            e["baselines_tries"] = tries + 1
            save()
            reply = timer.measure(p)
            if "baselines" in reply:
                e["baselines"] = {**reply["baselines"], "s": reply.get("s"), "cache": reply.get("cache")}
                e.pop("baselines_error", None)
                timed += 1
            else:
                e["baselines_error"] = str(reply.get("error"))[:300]
            e["baselines_done"] = True
            save()
            b = e.get("baselines") or {}
            print(f"L{p.level}.{p.problem_id} baselines: eager {_us(b.get('eager_us'))} compile "
                  f"{_us(b.get('compile_us'))} ({reply.get('s')} s) {e.get('baselines_error') or ''}", flush=True)
    finally:
        if worker is None:
            timer.close()
    return f"baselines: {timed} timed, {compiled} compiled, {failed} failed to compile, " \
           f"{sum(1 for p in todo if not entries[p.kernel_name].get('baselines_done'))} left for a later call"


def _us(v) -> str:
    return "-" if v is None else f"{v:.1f} us"


def level_ids(spec: str, level: int) -> list[int] | None:
    """The ids --problems picks in a level: None for all; "42" counts in every level, "L2.76" in
    level 2 only ([] when the spec names only other levels)."""
    tokens = [t.strip() for t in spec.split(",") if t.strip()]
    if not tokens:
        return None
    ids = []
    for t in tokens:
        if t[:1] in "Ll":
            lv, i = t[1:].split(".")
            if int(lv) == level:
                ids.append(int(i))
        else:
            ids.append(int(t))
    return ids


def worth_searching(start: dict | None, how: str, below: float) -> bool:
    if not start or not start["correct"] or how == "none":
        return False
    return how == "all" or (start["speedup_vs_compile"] or 0.0) < below


def as_status(entry: dict, which: str) -> dict:
    """A score.level_metrics problem dict from a state entry: `which` is "start" or "after"."""
    nums = entry.get("start") if which == "start" else (entry.get("best") or entry.get("start"))
    nums = nums or {}
    return {"problem_id": entry["id"], "name": entry["name"], "degenerate": entry.get("degenerate"),
            "attempted": bool(entry.get("start")), "correct": bool(nums.get("correct")),
            "flagged": bool(nums.get("flagged")), "speedup_vs_eager": nums.get("speedup_vs_eager"),
            "speedup_vs_compile": nums.get("speedup_vs_compile")}


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def markdown(state: dict, totals: dict) -> str:
    from autokernel.kb.score import level_metrics

    lines = [BEGIN, "### KernelBench levels (official problems, fp32, tolerance 1e-4): `benchmarks/kb_levels.py`", ""]
    device = sorted({(e.get("start") or {}).get("device") for e in state["problems"].values()} - {None})
    lines += [f"Device: {', '.join(device) or 'none yet'}; search: {state['args']}.", ""]
    lines += ["| level | problems | judged | correct | fast_1 vs eager | fast_1 vs compile | geomean x eager | "
              "geomean x compile | torch-only starts |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    search_rows, degenerate = [], []
    for lv in sorted(totals):
        entries = sorted((e for e in state["problems"].values() if e["level"] == lv), key=lambda e: e["id"])
        after = level_metrics([as_status(e, "after") for e in entries], totals[lv])
        before = level_metrics([as_status(e, "start") for e in entries], totals[lv])
        torch_only = sum(1 for e in entries if e.get("kind") == "torch-only")
        lines.append(f"| {lv} | {totals[lv]} | {sum(1 for e in entries if e.get('start'))} | "
                     f"{after['correct']}/{after['scored']} ({_pct(after['correctness_rate'])}) | "
                     f"{_pct(after['fast_p_vs_eager']['1.0'])} | {_pct(after['fast_p_vs_compile']['1.0'])} | "
                     f"{_x(after['geomean_speedup_vs_eager'])} | {_x(after['geomean_speedup_vs_compile'])} | "
                     f"{torch_only} |")
        searched = [e for e in entries if (e.get("search") or {}).get("experiments")]
        for label, m in (("before search", before), ("after search", after)):
            search_rows.append(f"| {lv} | {label} | {len(searched)} | "
                               + " | ".join(_pct(m["fast_p_vs_compile"][p]) for p in P_SHOWN)
                               + f" | {_x(m['geomean_speedup_vs_compile'])} | {_pct(m['fast_p_vs_eager']['1.0'])} |")
        degenerate += [f"L{lv} {e['id']}" for e in entries if e.get("degenerate")]
    if degenerate:
        lines += ["", f"Degenerate problems (reported apart, not in the numbers): {', '.join(degenerate)}."]
    lines += ["", "What search adds (the same problems, fast_p vs torch.compile before and after the loop's "
                  "experiments):", "",
              "| level | numbers | problems searched | " + " | ".join(f"fast_{p}" for p in P_SHOWN)
              + " | geomean x compile | fast_1 vs eager |", "|---|---|---:|" + "---:|" * (len(P_SHOWN) + 2)]
    lines += search_rows
    for lv in sorted(totals):
        entries = sorted((e for e in state["problems"].values() if e["level"] == lv), key=lambda e: e["id"])
        lines += ["", f"Level {lv}, per problem:", "",
                  "| id | name | start | correct | start x eager | start x compile | after x eager | after x compile "
                  "| exps | note |", "|---:|---|---|---|---:|---:|---:|---:|---:|---|"]
        for e in entries:
            s, b = e.get("start") or {}, (e.get("best") or e.get("start") or {})
            note = e.get("note") or ("degenerate" if e.get("degenerate") else "") or (s.get("error") or "") \
                or ("search: " + e["search"]["error"] if (e.get("search") or {}).get("error") else "")
            lines.append(f"| {e['id']} | {e['name']} | {e.get('kind') or '-'} | {'yes' if b.get('correct') else 'no'} | "
                         f"{_x(s.get('speedup_vs_eager'))} | {_x(s.get('speedup_vs_compile'))} | "
                         f"{_x(b.get('speedup_vs_eager'))} | {_x(b.get('speedup_vs_compile'))} | "
                         f"{(e.get('search') or {}).get('experiments', 0)} | "
                         f"{note[:90].replace('|', '/').replace(chr(10), ' ')} |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_results(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section.rstrip("\n") + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section
    path.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kb-path", default=os.environ.get("KERNELBENCH_PATH"))
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--problems", default="",
                    help="ids, comma-separated: 42 in every level, L2.76 in level 2 only (default: all)")
    ap.add_argument("-k", "--experiments", type=int, default=3, help="search experiments per problem searched")
    ap.add_argument("--search", choices=("all", "slower", "none"), default="slower")
    ap.add_argument("--search-below", type=float, default=1.5, help="'slower': searched below this x compile")
    ap.add_argument("--state", default="benchmarks/kb_levels_state.json")
    ap.add_argument("--results", default="benchmarks/RESULTS.md")
    ap.add_argument("--home", default=None, help="AutoKernel home for the store (default: a temporary one)")
    ap.add_argument("--out", default=None, help="copy the state and the results here after every phase")
    ap.add_argument("--deadline", type=float, default=None, help="seconds after which no phase starts")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per judgement")
    ap.add_argument("--max-phases", type=int, default=None, help="stop after this many phases (this call)")
    ap.add_argument("--shard", default=None, help="I/N: only every N-th problem from the I-th (one process per GPU)")
    ap.add_argument("--merge", nargs="+", default=None, help="state files of shards merged into --state first")
    ap.add_argument("--write-only", action="store_true", help="write the results from the state and stop")
    ap.add_argument("--no-baselines", action="store_true",
                    help="no baselines phase: every judge times its problem's eager and compile itself")
    ap.add_argument("--compile-workers", type=int, default=None,
                    help="processes compiling the references side by side (default: half the cores, at most 8; "
                         "0: none, the timing process compiles each itself)")
    ap.add_argument("--baselines-deadline", type=float, default=None,
                    help="seconds after which the baselines phase starts nothing more (default: --deadline)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    from autokernel.kb.problems import load_problems

    state_path, results = Path(args.state), Path(args.results)
    state = json.loads(state_path.read_text()) if state_path.exists() else {"problems": {}}
    how = "starts only" if args.search == "none" else f"-k {args.experiments} on {args.search} problems" + \
        (f" (below {args.search_below}x compile)" if args.search == "slower" else "")
    how += f" of {args.problems}" if args.problems else ""
    # the tables name how the numbers were made: this call's search, or (only writing) the merged states'
    made = ([state["args"]] if state.get("args") else []) if args.write_only and args.merge else [how]
    for other in args.merge or []:  # shards' states: each problem from the state that got furthest with it
        if not Path(other).is_file():
            print(f"--merge: no state file {other} (skipped)", flush=True)
            continue
        data = json.loads(Path(other).read_text())
        made += [data["args"]] if data.get("args") and data["args"] not in made else []
        for key, e in data["problems"].items():
            mine = state["problems"].get(key, {})
            if sum(bool(e.get(f)) for f in ("start_done", "search_done")) >= \
                    sum(bool(mine.get(f)) for f in ("start_done", "search_done")):
                state["problems"][key] = e
    state["args"] = "; ".join(made) or how
    try:
        picks = {lv: level_ids(args.problems, lv) for lv in args.levels}
    except ValueError:
        ap.error(f"--problems: {args.problems!r} is not a list of ids (42) and level ids (L2.76)")
    from autokernel.errors import AutoKernelError

    try:  # a missing checkout, level or problem: one line, nothing written
        problems = [p for lv in args.levels if picks[lv] != []
                    for p in load_problems("checkout", args.kb_path, level=lv, ids=picks[lv])]
        totals = {lv: len(load_problems("checkout", args.kb_path, level=lv)) for lv in args.levels}
    except AutoKernelError as exc:
        ap.exit(2, f"kb_levels: {exc.one_line()}\n")
    if args.shard:
        i, n = (int(v) for v in args.shard.split("/"))
        problems = problems[i::n]

    def save() -> None:
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(state, indent=1, sort_keys=True))
        write_results(results, markdown(state, totals))
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            shutil.copy(state_path, Path(args.out) / state_path.name)
            shutil.copy(results, Path(args.out) / results.name)

    if args.write_only:
        save()
        return 0
    home = args.home or tempfile.mkdtemp(prefix="ak-kb-levels-")
    os.environ["AUTOKERNEL_HOME"] = str(home)
    from autokernel.config import resolve_home
    from autokernel.kb.evaluate import KBWorker
    from autokernel.store import Store
    from autokernel.workspace import Workspace

    paths = resolve_home(home).ensure()
    if not args.no_baselines:
        from autokernel.kb.baselines import default_workers

        limit = args.baselines_deadline if args.baselines_deadline is not None else args.deadline
        said = baselines_phase(problems, state, save, cache_dir=Path(home) / "kb_compile_cache",
                               workers=default_workers() if args.compile_workers is None else args.compile_workers,
                               deadline_at=None if limit is None else t0 + limit)
        print(said, flush=True)
    with Store(paths.db) as store, KBWorker() as worker:
        workspace = Workspace.open(paths)
        ran = 0
        for p in problems:
            key = f"L{p.level}.{p.problem_id}"
            e = state["problems"].setdefault(key, {"level": p.level, "id": p.problem_id, "name": p.name})
            for name in ("start", "search"):
                done = e.get(f"{name}_done")
                if done:
                    continue
                if name == "search" and args.search == "none":
                    continue  # starts only: left open for a later call that searches
                if name == "search" and not worth_searching(e.get("start"), args.search, args.search_below):
                    e["search_done"] = True
                    continue
                if args.deadline is not None and time.monotonic() - t0 >= args.deadline \
                        or args.max_phases is not None and ran >= args.max_phases:
                    save()
                    print(f"stopped before {key} {name} (deadline or --max-phases)", flush=True)
                    return 0
                ran += 1
                tries = e.get(f"{name}_tries", 0)
                if tries >= 2:  # started twice, never finished: a device call ended inside it
                    e[f"{name}_done"], e["note"] = True, f"{name} did not finish within a device call (twice)"
                    save()
                    continue
                e[f"{name}_tries"] = tries + 1
                save()
                t = time.monotonic()
                left_h = max(0.05, ((3600.0 if args.deadline is None else args.deadline) - (t - t0)) / 3600.0)
                try:
                    res = phase(store, workspace, worker, p, args.kb_path, 0 if name == "start" else args.experiments,
                                args.timeout, left_h, baselines=e.get("baselines"))
                except Exception as exc:  # one problem failing is a result, not the end of the level
                    res = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                if name == "start":
                    e.update(start=res.get("start"), kind=res.get("kind"), degenerate=res.get("degenerate"))
                    if "error" in res:
                        e["note"] = res["error"]
                else:
                    e["search"] = {k: res.get(k) for k in ("experiments", "kept", "stop", "error") if k in res}
                    if res.get("best"):
                        e["best"] = res["best"]
                e[f"{name}_done"] = True
                e[f"{name}_s"] = round(time.monotonic() - t, 1)
                save()
                s = e.get("best") or e.get("start") or {}
                print(f"{key} {p.name} {name}: {e.get('kind')} correct={s.get('correct')} "
                      f"x eager={_x(s.get('speedup_vs_eager'))} x compile={_x(s.get('speedup_vs_compile'))} "
                      f"({e[f'{name}_s']} s) {res.get('error') or ''}", flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
