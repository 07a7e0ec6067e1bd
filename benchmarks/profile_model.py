"""Profile a model the way `autokernel profile` does and write the table as markdown, next to the
plain torch.profiler view of the same passes, so the two can be checked against each other.

    python benchmarks/profile_model.py --model llama-7b --batch 1 --seq 2048 --out $OUT [--append RESULTS.md]

Checks of truth it prints: the attributed GPU time against the separately measured forward time,
and the matmul / attention shares (the MLP's GEMMs are classified as fused_mlp, so the matmul
share is also given with them counted back).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/ itself off the path: its kernels.py would shadow the `kernels` package transformers imports
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]


def _shapes(entry: dict, limit: int = 3) -> str:
    parts = [f"{'x'.join(str(v) for v in s.values())} ×{w}"
             for s, w in list(zip(entry.get("shapes", []), entry.get("weights", [])))[:limit]]
    more = len(entry.get("shapes", [])) - limit
    return ", ".join(parts) + (f", +{more} more" if more > 0 else "")


def render(data: dict, versions: str, args: argparse.Namespace) -> str:
    total, fwd = data["total_gpu_ms"], data["forward_ms"]
    lines = [f"\n## Profile: {data['model']} (batch {args.batch}, seq {args.seq}, {args.dtype}), "
             f"{data['device']}, {dt.date.today()}\n",
             f"`python benchmarks/profile_model.py --model {args.model} --batch {args.batch} --seq {args.seq}` "
             f"({versions}; {args.warmup} warm-up and {args.iters} profiled forward passes; the same classification "
             "as `autokernel profile`).\n",
             "| kernel type | share of GPU time | ms / forward | calls / forward | shapes (x calls) | Amdahl ceiling |",
             "|---|---:|---:|---:|---|---:|"]
    for e in data["entries"]:
        if e["kernel_type"] == "other":
            continue
        lines.append(f"| {e['kernel_type']} | {100 * e['share']:.1f}% | {e['gpu_ms']:.3f} | {e['calls']} | "
                     f"{_shapes(e)} | {e['amdahl']:.2f}x |")
    other = next((e for e in data["entries"] if e["kernel_type"] == "other"), None)
    if other:
        top = ", ".join(f"{o['name']} {o['gpu_ms']:.2f} ms" for o in other.get("top_ops", [])[:4])
        lines.append(f"| other | {100 * other['share']:.1f}% | {other['gpu_ms']:.3f} | | {top} | |")
    lines.append(f"| total | 100% | {total:.3f} | | measured forward {fwd:.3f} ms | |")
    share = {e["kernel_type"]: e["share"] for e in data["entries"]}
    lines += ["", f"Attributed GPU time {total:.2f} ms is {100 * total / fwd:.1f}% of the measured forward "
                  f"({fwd:.2f} ms, CUDA events, timed separately).",
              f"Matmul share: {100 * share.get('matmul', 0):.1f}% on its own, "
              f"{100 * data['matmul_share_incl_mlp']:.1f}% with the MLP blocks' GEMMs counted back; attention "
              f"{100 * share.get('flash_attention', 0):.1f}%.",
              "", "Plain torch.profiler view of the same passes (self device time per forward, top 10):", "",
              "| op | ms / forward | calls / forward |", "|---|---:|---:|"]
    for op in data["top_ops"][:10]:
        lines.append(f"| {op['name']} | {op['ms']:.3f} | {op['calls']:g} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-7b")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--dtype", default=None, help="default: bf16 on a GPU, fp32 on the CPU")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--append", type=Path, help="append the markdown to this file (e.g. benchmarks/RESULTS.md)")
    args = ap.parse_args()

    import torch
    import transformers
    import triton

    from autokernel.models import load_model
    from autokernel.profile import profile_model

    bundle = load_model(args.model, batch=args.batch, seq=args.seq, dtype=args.dtype)
    args.dtype = bundle.dtype_name
    result = profile_model(bundle, warmup=args.warmup, iters=args.iters)
    data = result.to_dict()
    versions = f"torch {torch.__version__}, triton {triton.__version__}, transformers {transformers.__version__}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile.json").write_text(json.dumps(data, indent=1, default=str))
    text = render(data, versions, args)
    (args.out / "profile.md").write_text(text)
    if args.append:
        with args.append.open("a") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
