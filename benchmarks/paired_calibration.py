"""How often a back-to-back pair (autokernel/paired.py) calls a program faster than itself, on the
GPU, for the kernels of a loop run: each kernel's best is paired with the same program under another
key (a comment added), REPEATS times, and with any configurations given with --try, at the kernel's
heaviest model shape, exactly as the loop pairs a near miss. A pair of identical programs must say
"not faster"; the rounds' ratios show how far one round's two timings drift apart.

    python benchmarks/paired_calibration.py --home .autokernel-llama7b --repeats 2 \
        --try rmsnorm:TILE_ELEMS=8192 --out $OUT/paired_calibration.jsonl

One JSON line per pair (kernel, what, the verdict) to --out, and a summary line each on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def parse_try(items: list[str]) -> dict[str, dict]:
    """"rmsnorm:TILE_ELEMS=8192,MAX_WARPS=8" -> {"rmsnorm": {"TILE_ELEMS": 8192, "MAX_WARPS": 8}}."""
    out: dict[str, dict] = {}
    for item in items:
        kernel, _, assigns = item.partition(":")
        cfg = {}
        for a in filter(None, assigns.split(",")):
            name, _, raw = a.partition("=")
            try:
                cfg[name] = json.loads(raw)
            except json.JSONDecodeError:
                cfg[name] = raw
        out.setdefault(kernel, {}).update(cfg)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", required=True, help="the AutoKernel home of a loop run (its store and workspace)")
    ap.add_argument("--repeats", type=int, default=2, help="pairs of identical programs per kernel")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per pair (default: as many as the loop's)")
    ap.add_argument("--try", dest="tries", action="append", default=[], help="KERNEL_TYPE:NAME=VALUE,...")
    ap.add_argument("--out", default="paired_calibration.jsonl")
    args = ap.parse_args(argv)

    from autokernel import paired, screening
    from autokernel.bench.runner import BenchWorker
    from autokernel.config import resolve_home
    from autokernel.kernelfile import parse_source, with_config
    from autokernel.orchestrator import shapes_of
    from autokernel.store import Store
    from autokernel.workspace import Workspace

    paths = resolve_home(args.home)
    store, ws = Store(paths.db), Workspace.open(paths)
    tries = parse_try(args.tries)
    rounds = args.rounds or paired.ROUNDS  # and, without --rounds, up to MAX_ROUNDS as the loop does
    env = {**os.environ, "TRITON_CACHE_DIR": str(paths.cache / "triton"),
           "TORCHINDUCTOR_CACHE_DIR": str(paths.cache / "inductor")}
    worker = BenchWorker(env=env)
    screen = worker.screen
    import torch

    if not torch.cuda.is_available():  # as the loop times on a CPU: wall clock under the interpreter
        from autokernel.cpu_timing import CPUTimedJudge

        screen = CPUTimedJudge(worker.screen)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with out.open("a") as f:
            for k in store.list_kernels():
                start = next((e for e in store.list_experiments(kernel_id=k.id)
                              if e.status == "baseline" and e.latency_us), None)
                plan = screening.plan(shapes_of(start), shapes_of(start)) if start else None
                if plan is None:
                    print(f"{k.name}: no timed start, skipped", file=sys.stderr)
                    continue
                best = ws.read(k.name)

                def once(source: str, k=k, plan=plan):
                    res = screen(source=source, kernel_type=k.kernel_type, shapes=[plan.shape], weights=[1.0],
                                 dtype=k.dtype, timeout_s=120, checked=True)
                    return (res.latency_us, None) if res.correct and res.latency_us else \
                        (None, (res.error or res.outcome or "no timing").splitlines()[0][:200])

                pairs = [(f"identical #{i + 1}", best + f"\n# the same program, key {i + 1}\n")
                         for i in range(args.repeats)]
                if k.kernel_type in tries:
                    cfg = {**parse_source(best).config, **tries[k.kernel_type]}
                    pairs.append((json.dumps(tries[k.kernel_type], sort_keys=True), with_config(best, cfg)))
                for what, cand in pairs:
                    v = paired.compare(once, best, cand, rounds=rounds, shape=plan.shape,
                                       most=None if args.rounds else paired.MAX_ROUNDS)
                    f.write(json.dumps({"kernel": k.name, "what": what, **v.to_dict()}) + "\n")
                    f.flush()
                    ratios = [c / b for b, c in zip(v.best_us, v.candidate_us)]
                    print(f"{k.name} {what}: {v.line()} in {v.seconds:.1f} s; rounds "
                          + " ".join(f"{r:.4f}" for r in ratios), flush=True)
    finally:
        worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
