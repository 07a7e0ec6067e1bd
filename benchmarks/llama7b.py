"""LLaMA-7B on one GPU: profile, extract the starting kernels, verify; append the results to RESULTS.md.

    python3 benchmarks/llama7b.py --batch 1 --seq 2048 --results benchmarks/RESULTS.md --json $OUT/llama7b.json

The profile is shown in two views: AutoKernel's (LlamaMLP's three GEMMs count as fused_mlp) and the
usual profiler view where every GEMM is matmul. Verify plugs in the starting kernel of every type
the profile found (no optimization yet), so its speed-up says how far the starters are from
PyTorch, and its output check says they compute the same model.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# benchmarks/ itself off the path: its kernels.py would shadow the `kernels` package transformers imports
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]


def _md_profile(res: dict) -> list[str]:
    total = res["total_gpu_ms"]
    lines = [f"Profile: {res['model']}, batch {res['config']['batch']}, seq {res['config']['seq']}, "
             f"{res['config']['dtype']}, {res['device']} ({res['time_basis']}, {res['iters']} forward passes).", "",
             "| kernel type | share | ms / forward | calls / forward | shapes (x calls) | Amdahl ceiling | from |",
             "|---|---:|---:|---:|---|---:|---|"]
    for e in res["entries"]:
        shapes = "; ".join("x".join(str(v) for v in s.values()) + f" (x{w})"
                           for s, w in list(zip(e["shapes"], e["weights"]))[:4])
        if e["kernel_type"] == "other":
            shapes = ", ".join(f"{o['name']} {o['gpu_ms']:.2f} ms" for o in e.get("top_ops", [])[:4])
        lines.append(f"| {e['kernel_type']} | {100 * e['share']:.1f}% | {e['gpu_ms']:.3f} | {e['calls']} | {shapes} "
                     f"| {e['amdahl']:.2f}x | {e['label']} |")
    lines.append(f"| total | 100% | {total:.3f} | | measured forward (CUDA events): {res['forward_ms']:.3f} ms "
                 f"({100 * total / max(res['forward_ms'], 1e-9):.1f}% attributed) | | |")
    mm = next((e for e in res["entries"] if e["kernel_type"] == "matmul"), None)
    mlp = next((e for e in res["entries"] if e["kernel_type"] == "fused_mlp"), None)
    att = next((e for e in res["entries"] if e["kernel_type"] == "flash_attention"), None)
    lines += ["", "Two views of the GEMMs:",
              f"- AutoKernel view: matmul {100 * (mm['share'] if mm else 0):.1f}%, fused_mlp (its GEMMs + SiLU*mul) "
              f"{100 * (mlp['share'] if mlp else 0):.1f}%, attention {100 * (att['share'] if att else 0):.1f}%",
              f"- every GEMM as matmul (MLP GEMMs included): matmul {100 * res['matmul_share_incl_mlp']:.1f}%, "
              f"attention {100 * (att['share'] if att else 0):.1f}%", "",
              "Plain torch.profiler view (self GPU time per forward, top ops):", "",
              "| op | ms / forward | calls / forward |", "|---|---:|---:|"]
    for o in res["top_ops"][:10]:
        lines.append(f"| {o['name'][:90]} | {o['ms']:.3f} | {o['calls']:g} |")
    return lines


def _md_verify(v: dict) -> list[str]:
    def f(x, spec=".3f", suffix=""):
        return "-" if x is None else f"{x:{spec}}{suffix}"
    lines = [f"Verify with the starting kernels ({v['device']}, {v['dtype']}): outputs "
             f"{'MATCH' if v['ok'] else 'MISMATCH'} (relative L2 error {f(v['rel_error'], '.2e')}, "
             f"tolerance {v['tolerance']:g}; max abs {f(v['max_abs_error'], '.2e')}).", "",
             "| kernel | type | from | calls | fallbacks | rel. error alone | status |",
             "|---|---|---|---:|---:|---:|---|"]
    for k in v["kernels"]:
        status = "plugged" if k["ok"] else f"left out: {k['error']}"
        lines.append(f"| {k['name']} | {k['kernel_type']} | {k['source']} | {k['calls']} | {k['fallbacks']} "
                     f"| {f(k['rel_error'], '.2e')} | {status} |")
    lines += ["", f"Forward pass: eager {f(v['eager_ms'])} ms, with the kernels {f(v['plugged_ms'])} ms, "
                  f"torch.compile {f(v['compile_ms'])} ms -> speed-up {f(v['speedup_vs_eager'], '.3f', 'x')} vs eager, "
                  f"{f(v['speedup_vs_compile'], '.3f', 'x')} vs torch.compile; Amdahl prediction from the kernels' "
                  f"measured speed-ups {f(v['amdahl_prediction'], '.3f', 'x')} (1.0 when no experiment has run)."]
    lines += [f"- {n}" for n in v.get("notes", [])]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-7b")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--dtype", default=None, help="default bf16 on a GPU")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only for a smoke test with a tiny preset")
    ap.add_argument("--iters", type=int, default=5, help="profiled forward passes")
    ap.add_argument("--time-iters", type=int, default=20, help="timed forward passes in verify")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile timing")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--home", default=None, help="AutoKernel home for the store and workspace (default: temporary)")
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    ap.add_argument("--json", default=None, help="also write the raw results here")
    args = ap.parse_args()

    import torch

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("needs a CUDA GPU", file=sys.stderr)
            return 2
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    home = Path(args.home or tempfile.mkdtemp(prefix="ak-llama7b-"))
    os.environ["AUTOKERNEL_HOME"] = str(home)

    from autokernel.config import resolve_home
    from autokernel.extract import extract
    from autokernel.kernels import KERNEL_TYPES
    from autokernel.models import load_model
    from autokernel.profile import profile_model
    from autokernel.store import Store
    from autokernel.verify import verify
    from autokernel.workloads import Workload
    from autokernel.workspace import Workspace

    paths = resolve_home(home).ensure()
    bundle = load_model(args.model, batch=args.batch, seq=args.seq, dtype=args.dtype, device=args.device)
    prof = profile_model(bundle, warmup=3, iters=args.iters)
    res = prof.to_dict()
    lines = [f"## {args.model} profile and verify ({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"torch {torch.__version__}, {prof.device})", ""] + _md_profile(res)
    print("\n".join(lines), flush=True)

    out: dict = {"profile": res}
    if not args.no_verify:
        with Store(paths.db) as store:
            store.add_profile(prof.model, prof.entries, config=prof.config, device=prof.device,
                              total_gpu_ms=prof.total_gpu_ms, forward_ms=prof.forward_ms)
            ws = Workspace.open(paths)
            skipped: list[str] = []
            kernels = extract(store, ws, top=len(KERNEL_TYPES), on_skip=lambda n, why: skipped.append(f"{n}: {why}"))
            # the profiled workload only; benchmarks/workloads.py times every workload and mode
            v = verify(store, ws, model=prof.model, bundle=bundle, time_iters=args.time_iters,
                       with_compile=not args.no_compile, workloads=[Workload("prefill", args.batch, args.seq)])
        vd = v.to_dict()
        vd["notes"] = vd.get("notes", []) + [f"not extracted: {s}" for s in skipped]
        out["verify"] = vd
        out["extracted"] = [k.name for k in kernels]
        vlines = [""] + _md_verify(vd)
        print("\n".join(vlines), flush=True)
        lines += vlines

    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    with results.open("a") as fh:
        fh.write(("\n" if results.exists() and results.stat().st_size else "") + "\n".join(lines) + "\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    print(f"appended to {results}")
    return 0 if out.get("verify", {}).get("ok", True) else 13


if __name__ == "__main__":
    sys.exit(main())
