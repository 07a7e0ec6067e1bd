"""Host time per call of every Triton starter at its smallest spec shape, next to what its Triton
launches cost on their own.

    python3 benchmarks/launch_overhead.py --results benchmarks/RESULTS.md

At the smallest shape the GPU work is a few microseconds, so calls issued back to back run at the
host's pace: microseconds per call is the launch path (the wrapper's Python, its allocations, Triton's
launcher). Beside it, in the same process: an empty @triton.jit kernel launched as many times per call
as the starter launches (counted), its custom op through the dispatcher, and eager PyTorch's reference.
The target: the starter's wrapper costs at most 10 us more than its bare launches.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]

TARGET_US = 10.0


def _per_call_us(fns, reps: int, rounds: int = 11) -> list[float]:
    """Median host time per call of each function, measured in interleaved rounds: the host's pace
    drifts by several microseconds within a run, and interleaving puts every function under the same
    drift (separate blocks of rounds differed by 4 us between rows of one table)."""
    import torch

    for fn in fns:
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
            samples[i].append((time.perf_counter() - t0) / reps * 1e6)
    return [statistics.median(s) for s in samples]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default=None, help="comma-separated kernel types (default: all)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--results", default=None)
    args = ap.parse_args()

    import torch
    import triton
    import triton.language as tl
    from triton.runtime.jit import KernelInterface

    from autokernel.apply_model import starter_kernel
    from autokernel.bench.checks import make_inputs
    from autokernel.kernels import KERNEL_TYPES, get_spec
    from autokernel.kernels import launcher
    from autokernel.kernels.spec import to_dtype
    from autokernel.ops import register_source

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2

    @triton.jit
    def _empty(x_ptr):
        pass

    scratch = torch.empty(16, device="cuda")
    count = [0]
    original = KernelInterface.__getitem__

    def counting(self, grid):
        count[0] += 1
        return original(self, grid)

    rows = []
    types = args.types.split(",") if args.types else list(KERNEL_TYPES)
    for t in types:
        spec = get_spec(t)
        dtype = args.dtype if args.dtype in spec.dtypes else spec.dtypes[0]
        shape = min(spec.small_shapes + spec.edge_shapes + spec.default_shapes,
                    key=lambda s: (spec.bytes(s, to_dtype(dtype)), spec.flops(s, to_dtype(dtype))))
        k = starter_kernel(t)
        op = register_source(k.source, k.path)
        inputs = make_inputs(spec, shape, to_dtype(dtype), "cuda", 5)
        op.fn(*inputs)
        launcher.clear()  # a cold launch cache: every launch goes through __getitem__ once, and is counted
        KernelInterface.__getitem__ = counting
        count[0] = 0
        op.fn(*inputs)
        KernelInterface.__getitem__ = original
        launches = count[0]
        starter, bare, via_op, eager = _per_call_us(
            [lambda: op.fn(*inputs), lambda: [_empty[(1,)](scratch) for _ in range(launches)],
             lambda: op.op(*inputs), lambda: spec.reference(*inputs)], args.reps)
        rows.append((t, spec.shape_label(shape), dtype, launches, starter, bare, starter - bare, via_op, eager))
        print(f"{t:18s} {spec.shape_label(shape):>16s} launches {launches}  starter {starter:6.1f} us  "
              f"empty x{launches} {bare:6.1f} us  over {starter - bare:5.1f} us  op {via_op:6.1f} us  "
              f"eager {eager:6.1f} us", flush=True)
    device = torch.cuda.get_device_name()
    lines = [f"### Host time per call of the Triton starters at their smallest shapes "
             f"({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; {device}, torch {torch.__version__}, "
             f"triton {triton.__version__})", "",
             f"Calls issued back to back (host-paced), median of 11 interleaved rounds of {args.reps}. 'over' is the starter "
             f"minus an empty @triton.jit kernel launched as many times; target <= {TARGET_US:g} us.", "",
             "| kernel | shape | dtype | launches | starter (us) | empty launches (us) | over (us) | target "
             "| via custom op (us) | eager PyTorch (us) |",
             "|---|---|---|---:|---:|---:|---:|---|---:|---:|"]
    for t, shape, dtype, n, s, b, over, o, e in rows:
        lines.append(f"| {t} | {shape} | {dtype} | {n} | {s:.1f} | {b:.1f} | {over:.1f} | "
                     f"{'met' if over <= TARGET_US else 'NOT met'} | {o:.1f} | {e:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.results:
        with open(args.results, "a") as fh:
            fh.write("\n" + text)
    return 0 if all(r[6] <= TARGET_US for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
