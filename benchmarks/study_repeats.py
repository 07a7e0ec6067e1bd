"""How often the search proposes the best's very program again, on the matmul starter's real
space at LLaMA-7B's shapes, and what that costs the search. CPU only, no GPU timing: a simulation.

What is real: the search proposer (SearchProposer: the incumbent's ring, then Optuna's TPE), the
starter file and its SEARCH_SPACE, valid_config and effective_config, and which program a
configuration runs at each shape (the starter's own call_config and split-K decision, run on the
imported module). What is made up: the time a program takes, a smooth cost model of tiles, waves,
stages and variants with a fixed +-2% per-program scatter, whose optimum is a few percent past the
start's per-shape table (its shape is not the point, only that there are better programs to find).

Each proposal is judged as the loop would: a configuration whose program equals the best's at
every shape is left at the screen as a repeat ("same program as the best", timed as the best),
a faster one by 1% or more is kept (the new incumbent), any other is reverted. Four arms: the
search told the kernel's shapes or not (effective_config then leaves out GEMV_* and PAD_UNALIGNED),
and a repeat scored as the best (what the study did before) or as infeasible (study.REPEAT). Told
the shapes, the search also moves the persistent switches, which the per-shape table reads there.

    python benchmarks/study_repeats.py --trials 150 --seeds 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autokernel.kernelfile import import_kernel, read_kernel_file, with_config  # noqa: E402
from autokernel.kernels import starter_path  # noqa: E402
from autokernel.proposers import study as studies  # noqa: E402
from autokernel.proposers.base import KernelContext, SearchExhausted  # noqa: E402
from autokernel.proposers.search import SearchProposer  # noqa: E402
from autokernel.screening import SAME_PROGRAM  # noqa: E402

SHAPES = [{"M": 2048, "N": 4096, "K": 4096}, {"M": 64, "N": 2048, "K": 1}, {"M": 2048, "N": 32000, "K": 4096}]
WEIGHTS = [128, 1, 1]
SMS = 132
PEAK = 700e12  # bf16 FLOP/s, about cuBLAS at these shapes on the H200
COPY = 4.2e12  # bytes/s
KEEP_BELOW = 0.99  # of the best: the keep rule's 1% floor


def programs(mod, cfg: dict) -> tuple:
    """What runs at each shape under `cfg`: the resolved tunables, the split count and the paths."""
    import torch

    g = vars(mod)
    g.update(cfg)
    mod._table_entry.cache_clear()
    out = []
    for s in SHAPES:
        M, N, K = s["M"], s["N"], s["K"]
        if N == 1:
            out.append(("gemv", cfg["GEMV_BLOCK_M"], cfg["GEMV_BLOCK_K"], cfg["GEMV_WARPS"]))
            continue
        c = mod.call_config(torch.bfloat16, M, N, K)
        tiles = mod.cdiv(M, c["BLOCK_M"]) * mod.cdiv(N, c["BLOCK_N"])
        splits, _ = mod._splits(tiles, K, c["BLOCK_K"], cfg["SPLIT_K_MIN_CHUNK"], cfg["SPLIT_K_BELOW_TILES"])
        variant = c["VARIANT"] if splits == 1 else "split"
        persistent = variant == "persistent"
        out.append((variant, c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["GROUP_M"], c["NUM_WARPS"],
                    c["NUM_STAGES"], splits, *((c["EPILOGUE_SUBTILE"], c["PERSISTENT_LOOP"], c["TMA_DESC"])
                                                if persistent else ())))
    return tuple(out)


def seconds(prog: tuple, shape: dict) -> float:
    """The made-up cost of one program at one shape (see the module docstring)."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    flops = 2.0 * M * N * K
    if prog[0] == "gemv":
        return 3e-6 + 2.0 * M * K / COPY
    variant, bm, bn, bk, group, warps, stages, splits, *rest = prog
    tiles = -(-M // bm) * -(-N // bn) * splits
    waves = -(-tiles // SMS)
    eff = tiles / (waves * SMS)
    eff *= min(1.0, bm * bn / (128 * 256)) ** 0.3
    eff *= {32: 0.85, 64: 1.0, 128: 0.93}[bk] * {2: 0.8, 3: 0.93, 4: 0.97, 5: 1.0}[stages]
    eff *= 0.9 if warps == 4 and bm * bn >= 128 * 128 else 1.0
    eff *= {1: 0.9, 4: 0.97, 8: 0.99, 16: 1.0}[group]
    eff *= {"persistent": 1.0, "tma": 0.95, "pointer": 0.85, "split": 0.85}[variant]
    if rest:
        sub, loop, desc = rest
        eff *= {1: 0.97, 2: 0.98, 4: 1.0}[sub] * {"plain": 0.97, "flatten": 1.0, "warp_specialize": 0.99}[loop]
        eff *= 1.0 if desc == "device" else 0.99
    extra = 8.0 * M * N * splits / COPY if splits > 1 else 0.0
    scatter = int(hashlib.sha256(repr((prog, M, N, K)).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return (flops / (PEAK * eff) + extra) * (0.98 + 0.04 * scatter) + 4e-6


def model_us(prog: tuple) -> tuple[float, float]:
    """(weighted total over the shapes, the heaviest shape's time), microseconds."""
    per = [seconds(p, s) * 1e6 for p, s in zip(prog, SHAPES)]
    return sum(w * t for w, t in zip(WEIGHTS, per)), per[0]


def row(cfg, status, total, heavy, error=None):
    details = json.dumps([{"shape": SHAPES[0], "latency_us": heavy, "weight": WEIGHTS[0]}])
    return SimpleNamespace(status=status, config_json=json.dumps(cfg), run_id=1, device="sim",
                           latency_us=total, details_json=None if status == "screened" else details,
                           screen_us=heavy if status == "screened" else None, error=error)


def run_arm(source: str, start: dict, mod, trials: int, seed: int, with_shapes: bool, repeat: float) -> dict:
    studies.REPEAT = repeat
    best_cfg, best_prog = start, programs(mod, start)
    best_total, best_heavy = model_us(best_prog)
    start_total = best_total
    history = [row(start, "baseline", best_total, best_heavy)]
    proposer = SearchProposer(seed=seed)
    ctx = KernelContext(name="llama-7b.matmul", kernel_type="matmul", backend="triton", dtype="bfloat16",
                        shapes=SHAPES if with_shapes else [], weights=WEIGHTS, run_id=1)
    repeats = keeps = 0
    t0 = time.perf_counter()
    for _ in range(trials):
        try:
            prop = proposer.propose(with_config(source, best_cfg), None, history, kernel=ctx)
        except SearchExhausted:
            break
        cfg = {**start, **prop.config}
        prog = programs(mod, cfg)
        total, heavy = model_us(prog)
        if prog == best_prog:
            repeats += 1
            history.append(row(cfg, "screened", best_total, best_heavy, f"{SAME_PROGRAM} at all 3 model shapes"))
        elif total < best_total * KEEP_BELOW:
            keeps += 1
            history.append(row(cfg, "kept", total, heavy))
            best_cfg, best_prog, best_total, best_heavy = cfg, prog, total, heavy
        else:
            history.append(row(cfg, "reverted", total, heavy))
    n = len(history) - 1
    return {"repeats": repeats, "keeps": keeps, "proposals": n, "best_vs_start": best_total / start_total,
            "s_per_proposal": (time.perf_counter() - t0) / max(1, n)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=150)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    kf = read_kernel_file(starter_path("matmul", "triton"))
    source, start, mod = kf.source, dict(kf.config), import_kernel(kf)
    arms = [("no shapes, repeat = best", False, 0.0), ("no shapes, repeat infeasible", False, studies.REPEAT),
            ("shapes, repeat = best", True, 0.0), ("shapes, repeat infeasible", True, studies.REPEAT)]
    print(f"matmul starter, LLaMA-7B shapes, {args.trials} proposals x {args.seeds} seeds (simulated times)")
    print("| arm | repeats (median, range) | keeps | best / start (median, range) | s per proposal |")
    print("|---|---|---|---|---|")
    for label, with_shapes, repeat in arms:
        res = [run_arm(source, start, mod, args.trials, seed, with_shapes, repeat) for seed in range(args.seeds)]
        rep = [r["repeats"] for r in res]
        best = [r["best_vs_start"] for r in res]
        print(f"| {label} | {statistics.median(rep):.0f} ({min(rep)}-{max(rep)}) of {res[0]['proposals']} "
              f"| {statistics.median([r['keeps'] for r in res]):.0f} "
              f"| {statistics.median(best):.4f} ({min(best):.4f}-{max(best):.4f}) "
              f"| {statistics.median([r['s_per_proposal'] for r in res]):.3f} |", flush=True)


if __name__ == "__main__":
    main()
