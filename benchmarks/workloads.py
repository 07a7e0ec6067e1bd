"""A model where users run it: every workload, eager / torch.compile / reduce-overhead, with and without
AutoKernel's kernels, in one process. The table RESULTS.md holds for LLaMA-7B.

    python3 benchmarks/workloads.py --model llama-7b --state $OUT/workloads.json --results benchmarks/RESULTS.md

Kernels: the starters of --kernels (default rmsnorm and rotary_embedding: the types whose starters are
ahead of PyTorch; the GEMM-class starters are behind cuBLAS and would only be tried and dropped).
Which kernels go in is decided per workload, mode and shape exactly as `autokernel verify` decides
(autokernel.workload_timing). --state keeps finished workloads in a JSON file, so a run that the
device's time limit cuts short continues where it stopped; the Markdown table is written once every
workload is in the state (or with --partial).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# benchmarks/ itself off the path: its kernels.py would shadow the `kernels` package transformers imports
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-7b")
    ap.add_argument("--kernels", default="rmsnorm,rotary_embedding", help="starter types, comma-separated")
    ap.add_argument("--workload", action="append", help="prefill:1x2048, decode:32@2048, ... (default: all)")
    ap.add_argument("--mode", action="append", help="eager, compile, reduce-overhead (default: all)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per variant")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--state", default=None, help="JSON file of finished workloads (read and written)")
    ap.add_argument("--results", default=None, help="append the Markdown table to this file")
    ap.add_argument("--partial", action="store_true", help="write the table even if workloads are missing")
    ap.add_argument("--deadline-s", type=float, default=None, help="start no workload after this many seconds")
    args = ap.parse_args()

    import torch

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("needs a CUDA GPU", file=sys.stderr)
            return 2
        os.environ.pop("TRITON_INTERPRET", None)
    from autokernel.apply_model import starter_kernel
    from autokernel.models import load_model
    from autokernel.ops import register_source
    from autokernel.report import workloads_md
    from autokernel.verify import reference_output
    from autokernel.workload_timing import MODES, WorkloadTimer
    from autokernel.workloads import default_workloads, parse_workload

    t_start = time.monotonic()
    state_path = Path(args.state) if args.state else None
    state = json.loads(state_path.read_text()) if state_path and state_path.exists() else {}
    bundle = load_model(args.model, batch=1, seq=128, device=args.device)
    device = torch.cuda.get_device_name() if bundle.device.type == "cuda" else "cpu"
    import transformers
    import triton

    meta = {"model": args.model, "device": device, "dtype": bundle.dtype_name, "torch": torch.__version__,
            "triton": triton.__version__, "transformers": transformers.__version__,
            "date": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"}
    state.setdefault("meta", meta)
    done = state.setdefault("workloads", {})
    _ref, tol, reference, eager_error, _ = reference_output(bundle, bundle.make_inputs(4242))
    state["tolerance"] = tol + (eager_error or 0.0)
    ops = {}
    for t in [t.strip() for t in args.kernels.split(",") if t.strip()]:
        k = starter_kernel(t)
        ops[t] = register_source(k.source, k.path)
        print(f"{t}: {ops[t].name} ({ops[t].kind}{', ' + ops[t].note if ops[t].note else ''})", flush=True)
    state["ops"] = {t: {"op": o.name, "kind": o.kind, "note": o.note} for t, o in ops.items()}
    workloads = [parse_workload(w) for w in args.workload] if args.workload else default_workloads(bundle)
    timer = WorkloadTimer(bundle, ops, iters=args.iters, modes=tuple(args.mode) if args.mode else MODES,
                          tolerance=state["tolerance"], progress=lambda m: print(m, flush=True))
    for w in workloads:
        if w.label in done:
            continue
        if args.deadline_s and time.monotonic() - t_start > args.deadline_s:
            print(f"deadline: {w.label} left for the next call", flush=True)
            break
        t0 = time.monotonic()
        try:
            res = timer.run(w).to_dict()
        except Exception as exc:  # reported in the table; the other workloads still run
            res = {"workload": w.label, "spec": w.spec, "rows": [], "error": f"{type(exc).__name__}: {exc}"[:400]}
        res["seconds"] = time.monotonic() - t0
        done[w.label] = res
        if state_path:
            state_path.parent.mkdir(parents=True, exist_ok=True)
            state_path.write_text(json.dumps(state, indent=1, default=str))
        sp = res.get("speedup")
        print(f"{w.label}: {('%.3fx' % sp) if sp else res.get('error')} ({res['seconds']:.0f} s)", flush=True)
    complete = all(w.label in done for w in workloads)
    data = dict(state["meta"], workloads=[done[w.label] for w in workloads if w.label in done])
    table = workloads_md(data)
    print(table)
    if args.results and (complete or args.partial):
        m = state["meta"]
        head = (f"### {m['model']} at its workloads, with the starters of {args.kernels} ({m['date']}; {m['device']}, "
                f"torch {m['torch']}, triton {m['triton']}, transformers {m['transformers']})\n\n"
                f"Output tolerance {state['tolerance']:.3g} (relative L2 vs the model without kernels, "
                f"{reference} reference). Ops: " + ", ".join(f"{t} {o['op']} ({o['kind']})" for t, o in state['ops'].items())
                + ".\n\n")
        with open(args.results, "a") as fh:
            fh.write("\n" + head + table)
        print(f"appended to {args.results}")
    return 0 if complete else 3


if __name__ == "__main__":
    sys.exit(main())
