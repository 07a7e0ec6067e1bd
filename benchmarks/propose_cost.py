"""What one proposal of the search costs on the host, as the study grows: the real SearchProposer
on the matmul starter's real space at LLaMA-7B's shapes, its study in a file as a loop keeps it
(`<home>/studies.journal`), the verdicts from benchmarks/study_repeats.py's made-up cost model (a
keep, a revert or a repeat of the best's program, as the loop would record them). CPU only.

The proposal is host time between two GPU judgements: in an H100 llama-7b loop the median screen
took 0.21 s, and the loop's wall clock ran 2.2 minutes ahead of its rows' durations in 25 (run 9).

    python benchmarks/propose_cost.py --trials 500 --every 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import study_repeats as sim  # noqa: E402

from autokernel.config import Paths  # noqa: E402
from autokernel.kernelfile import import_kernel, read_kernel_file, with_config  # noqa: E402
from autokernel.kernels import starter_path  # noqa: E402
from autokernel.proposers.base import KernelContext  # noqa: E402
from autokernel.proposers.search import SearchProposer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--every", type=int, default=100, help="report the mean over each stretch of this many")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    kf = read_kernel_file(starter_path("matmul", "triton"))
    source, start, mod = kf.source, dict(kf.config), import_kernel(kf)
    best_cfg, best_prog = start, sim.programs(mod, start)
    best_total, best_heavy = sim.model_us(best_prog)
    history = [sim.row(start, "baseline", best_total, best_heavy)]
    ctx = KernelContext(name="llama-7b.matmul", kernel_type="matmul", backend="triton", dtype="bfloat16",
                        shapes=sim.SHAPES, weights=sim.WEIGHTS, run_id=1)
    with tempfile.TemporaryDirectory() as home:
        studies = Paths(Path(home)).studies
        proposer = SearchProposer(seed=args.seed, study_path=studies)
        print(f"matmul starter, LLaMA-7B shapes, study in {studies.name}; seconds per proposal")
        print("| trials | mean | median | max |")
        print("|---:|---:|---:|---:|")
        times: list[float] = []
        for i in range(args.trials):
            t0 = time.perf_counter()
            prop = proposer.propose(with_config(source, best_cfg), None, history, kernel=ctx)
            times.append(time.perf_counter() - t0)
            cfg = {**start, **prop.config}
            prog = sim.programs(mod, cfg)
            total, heavy = sim.model_us(prog)
            if prog == best_prog:
                history.append(sim.row(cfg, "screened", best_total, best_heavy, f"{sim.SAME_PROGRAM} at all 3 shapes"))
            elif total < best_total * sim.KEEP_BELOW:
                history.append(sim.row(cfg, "kept", total, heavy))
                best_cfg, best_prog, best_total, best_heavy = cfg, prog, total, heavy
            else:
                history.append(sim.row(cfg, "reverted", total, heavy))
            if (i + 1) % args.every == 0:
                part = times[-args.every:]
                print(f"| {i + 1 - args.every + 1}-{i + 1} | {statistics.mean(part):.3f} | "
                      f"{statistics.median(part):.3f} | {max(part):.3f} |", flush=True)


if __name__ == "__main__":
    main()
