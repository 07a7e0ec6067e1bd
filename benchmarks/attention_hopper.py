"""Causal attention on Hopper against cuDNN SDPA, in one process (issue 20: ">= 1.00x cuDNN SDPA at
B4 S4096 d=128"): the flash_attention starter's pointer and tma variants against SDPA's cuDNN and
FlashAttention-2 backends, its default choice, and torch.compile of the same call.

    python benchmarks/attention_hopper.py [--variant pointer|tma|all] [--shape 4x32x32x4096x128x1]
        [--dtype bf16|fp16] [--rep-ms 1000] [--results $OUT/attention_hopper.md] [--json $OUT/attention_hopper.json]

GPU only (exits 2 without CUDA). Each entry is first checked against an fp32 SDPA of the same
inputs at the spec's tolerance (a wrong kernel is reported, not timed), then timed with
triton.testing.do_bench (L2 flushed before every repetition): median, p10-p90 spread, min, TFLOP/s
(the spec's causal FLOP count) and x = cuDNN median / median. A candidate that fails to build or
run is recorded with its error and the run goes on.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
from autokernel.kernels import get_spec  # noqa: E402

# the starter's candidates: None is the committed file (VARIANT "pointer")
POINTER = {"pointer 128x64 w8 s3 (committed)": None,
           "pointer 128x128 w8 s2": {"BLOCK_N": 128, "NUM_STAGES": 2}}
TMA = {"tma 128x64 w8 s3": {"VARIANT": "tma"},
       "tma 128x64 w4 s3 warp_spec": {"VARIANT": "tma", "WARP_SPEC": True, "NUM_WARPS": 4},
       "tma 128x64 w4 s2 warp_spec": {"VARIANT": "tma", "WARP_SPEC": True, "NUM_WARPS": 4, "NUM_STAGES": 2},
       "tma 128x128 w4 s2 warp_spec": {"VARIANT": "tma", "WARP_SPEC": True, "NUM_WARPS": 4, "BLOCK_N": 128,
                                       "NUM_STAGES": 2},
       "tma 128x64 w8 s4": {"VARIANT": "tma", "NUM_STAGES": 4},
       "tma 128x128 w8 s2": {"VARIANT": "tma", "BLOCK_N": 128, "NUM_STAGES": 2},
       "tma 128x128 w8 s3": {"VARIANT": "tma", "BLOCK_N": 128, "NUM_STAGES": 3},
       "tma host 128x64 w8 s3": {"VARIANT": "tma", "TMA_DESC": "host"},
       "tma host 128x128 w8 s2": {"VARIANT": "tma", "TMA_DESC": "host", "BLOCK_N": 128, "NUM_STAGES": 2}}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _gemm_bench():
    """benchmarks/gemm_hopper.py as a module: its starter loading and environment line."""
    spec = importlib.util.spec_from_file_location("gemm_hopper_bench", ROOT / "benchmarks" / "gemm_hopper.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def candidates(variant: str) -> dict:
    return {**(POINTER if variant in ("pointer", "all") else {}), **(TMA if variant in ("tma", "all") else {})}


def libraries() -> dict:
    """SDPA through each backend, its own choice, and torch.compile of the call (what a compiled
    model runs)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def default(q, k, v, causal, scale):
        # enable_gqa only where kv heads are fewer: some backends refuse the flag itself
        gqa = q.shape[1] != k.shape[1]
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)

    def backend(b):
        def run(q, k, v, causal, scale):
            with sdpa_kernel([b]):
                return default(q, k, v, causal, scale)
        return run

    return {"sdpa cuDNN": backend(SDPBackend.CUDNN_ATTENTION), "sdpa flash": backend(SDPBackend.FLASH_ATTENTION),
            "sdpa default": default, "torch.compile(sdpa)": torch.compile(default, dynamic=False)}


def timing(fn, rep_ms: int) -> dict:
    from triton.testing import do_bench

    times = sorted(do_bench(fn, warmup=100, rep=rep_ms, return_mode="all"))
    q = statistics.quantiles(times, n=10)
    return {"ms": statistics.median(times), "p10": q[0], "p90": q[-1], "min": times[0], "n": len(times)}


def measure(name: str, fn, args: tuple, ref: torch.Tensor, tol: tuple, rep_ms: int) -> dict:
    row = {"name": name}
    try:
        out = fn(*args)
        torch.cuda.synchronize()
        err = (out.float() - ref).abs().max().item()
        row["max_err"] = err
        if not torch.allclose(out.float(), ref, atol=tol[0], rtol=tol[1]):
            row["error"] = f"wrong: max abs error {err:.3g} past atol {tol[0]} rtol {tol[1]}"
            return row
        row.update(timing(lambda: fn(*args), rep_ms))
    except Exception as exc:  # a candidate that cannot build or run: recorded, the run goes on
        lines = [ln for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip()]
        row["error"] = lines[-1][:300] if lines else type(exc).__name__
        traceback.print_exc()
    return row


def report(rows: list[dict], env: str, shape_label: str, dtype: str, flops: float) -> str:
    base = next((r["ms"] for r in rows if r["name"] == "sdpa cuDNN" and "ms" in r), None)
    lines = [f"### Causal attention {shape_label} {dtype}", "", env, "",
             "do_bench, L2 flushed before every repetition; ms median (p10-p90, min); x = cuDNN median / median", "",
             "| entry | ms | p10-p90 | min | TFLOP/s | x cuDNN | max err |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "ms" not in r:
            lines.append(f"| {r['name']} | err | | | | | {r.get('error', '')} |")
            continue
        x = f"{base / r['ms']:.3f}" if base else "n/a"
        lines.append(f"| {r['name']} | {r['ms']:.4f} | {r['p10']:.4f}-{r['p90']:.4f} | {r['min']:.4f} | "
                     f"{flops / (r['ms'] * 1e-3) / 1e12:.1f} | {x} | {r['max_err']:.2e} |")
    return "\n".join(lines) + "\n"


def run(args) -> int:
    spec = get_spec("flash_attention")
    shape = spec.parse_shape(args.shape)
    dtype = DTYPES[args.dtype]
    gemm = _gemm_bench()
    env = gemm.environment("cuda")
    print(env, flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = spec.make_inputs(shape, dtype, "cuda", gen)
    q, k, v, causal, scale = inputs
    # fp32 reference (SDPA picks its memory-efficient kernel for fp32: no S x S matrix)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=scale,
                                         enable_gqa=True)
    tol = spec.tolerances[str(dtype).replace("torch.", "")]
    cache = Path(tempfile.mkdtemp(prefix="attention_hopper_"))
    entries = {}
    for name, overrides in candidates(args.variant).items():
        try:
            entries[name] = gemm.load("flash_attention", overrides, cache).kernel_fn
        except Exception as exc:
            entries[name] = exc
    entries.update(libraries())
    rows = []
    for name, fn in entries.items():
        if isinstance(fn, Exception):
            rows.append({"name": name, "error": f"{type(fn).__name__}: {str(fn)[:300]}"})
        else:
            rows.append(measure(name, fn, inputs, ref, tol, args.rep_ms))
        r = rows[-1]
        print(f"  {name}: " + (f"{r['ms']:.4f} ms" if "ms" in r else r["error"]), flush=True)
    text = report(rows, env, spec.shape_label(shape), args.dtype, spec.flops(shape, dtype))
    print(text, flush=True)
    if args.results:
        with args.results.open("a") as f:
            f.write("\n" + text)
    if args.json:
        args.json.write_text(json.dumps({"environment": env, "shape": spec.shape_label(shape), "dtype": args.dtype,
                                         "rows": rows}, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", choices=("pointer", "tma", "all"), default="all",
                    help="which of the starter's candidates to time (the libraries are always timed)")
    ap.add_argument("--shape", default="4x32x32x4096x128x1", help="batch x heads x kv_heads x seq x head_dim x causal")
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    ap.add_argument("--rep-ms", type=int, default=1000,
                    help="do_bench's rep: milliseconds of timed repetitions per entry (~90 at B4 S4096)")
    ap.add_argument("--results", type=Path, help="append the markdown report here")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("attention_hopper.py needs a CUDA GPU", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
