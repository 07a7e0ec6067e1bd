"""Causal attention on Hopper against cuDNN SDPA, in one process (issue 20: ">= 1.00x cuDNN SDPA at
B4 S4096 d=128"): the flash_attention starter's pointer and tma variants against SDPA's cuDNN and
FlashAttention-2 backends, its default choice, and torch.compile of the same call.

    python benchmarks/attention_hopper.py [--variant pointer|tma|all] [--shape 4x32x32x4096x128x1]
        [--dtype bf16|fp16] [--rep-ms 1000] [--results $OUT/attention_hopper.md] [--json $OUT/attention_hopper.json]
    python benchmarks/attention_hopper.py --decode [--shape 1x32x32x1x128x1x2048 ...] [--results ...]

--decode times the starter's decode path (split-KV, one query against a long KV cache) against
SDPA's default choice and its flash, memory-efficient and cuDNN backends and torch.compile, at B1
and B32 with 2048- and 8192-token caches, 32 heads of 128, kv heads 32 and 8: each shape unmasked
and with a static cache's bool mask (its last 64 slots unfilled), as transformers passes it. Per
entry: GPU time (do_bench, L2 flushed) and the host's wall time per call (200 calls back to back,
then a sync: what eager decoding sees).

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
# the decode path's candidates: None is the committed file (splits from the SM count)
DECODE = {"decode BN64 w4 s2 auto splits (committed)": None,
          "decode BN128 w4 s1": {"DECODE_BLOCK_N": 128, "DECODE_NUM_STAGES": 1},
          "decode BN64 w4 s3 4 waves": {"DECODE_NUM_STAGES": 3, "DECODE_WAVES": 4},
          "decode BN32 w2 s3": {"DECODE_BLOCK_N": 32, "DECODE_NUM_WARPS": 2, "DECODE_NUM_STAGES": 3},
          "decode BN64 w4 16 splits": {"DECODE_SPLITS": 16}}
DECODE_SHAPES = [f"{b}x32x{hkv}x1x128x1x{sk}" for sk in (2048, 8192) for b in (1, 32) for hkv in (32, 8)]
UNFILLED = 64  # a static cache's slots past the tokens so far, masked out


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


def decode_libraries() -> dict:
    """SDPA with the decode call's explicit mask (bottom-right causal and the cache's mask: SDPA's
    own is_causal is top-left), through each backend, its own choice, and torch.compile."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def default(q, k, v, attn_mask, scale):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale,
                                              enable_gqa=q.shape[1] != k.shape[1])

    def backend(b):
        def run(*args):
            with sdpa_kernel([b]):
                return default(*args)
        return run

    return {"sdpa cuDNN": backend(SDPBackend.CUDNN_ATTENTION), "sdpa flash": backend(SDPBackend.FLASH_ATTENTION),
            "sdpa efficient": backend(SDPBackend.EFFICIENT_ATTENTION), "sdpa default": default,
            "torch.compile(sdpa)": torch.compile(default, dynamic=False)}


def decode_cases(shapes: list[str]) -> list[tuple[dict, bool]]:
    """(shape, masked) pairs: every shape without a mask and with a static cache's mask."""
    spec = get_spec("flash_attention")
    return [(spec.parse_shape(text), masked) for text in shapes for masked in (False, True)]


def wall_us(fn, calls: int = 200) -> float:
    """Host wall time per call, calls back to back and one sync at the end."""
    import time

    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


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


def run_decode(args) -> int:
    from autokernel.kernels.flash_attention import explicit_mask

    spec = get_spec("flash_attention")
    dtype = DTYPES[args.dtype]
    gemm = _gemm_bench()
    env = gemm.environment("cuda")
    print(env, flush=True)
    cache = Path(tempfile.mkdtemp(prefix="attention_decode_"))
    ours = {}
    for name, overrides in DECODE.items():
        try:
            ours[name] = gemm.load("flash_attention", overrides, cache).kernel_fn
        except Exception as exc:
            ours[name] = exc
    libs = decode_libraries()
    tol = spec.tolerances[str(dtype).replace("torch.", "")]
    report_rows = []
    for shape, masked in decode_cases(args.shape or DECODE_SHAPES):
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, causal, scale = spec.make_inputs(shape, dtype, "cuda", gen)
        mask = None
        if masked:
            mask = torch.ones(q.shape[0], 1, q.shape[2], k.shape[2], dtype=torch.bool, device="cuda")
            mask[..., k.shape[2] - UNFILLED:] = False
        ref = spec.reference(q.float(), k.float(), v.float(), causal, scale, mask)
        attn_mask = explicit_mask(q, k, causal, mask)
        label = spec.shape_label(shape) + (" masked" if masked else "")
        rows = []
        for name, fn in {**ours, **libs}.items():
            if isinstance(fn, Exception):
                rows.append({"name": name, "error": f"{type(fn).__name__}: {str(fn)[:300]}"})
                continue
            call_args = (q, k, v, causal, scale, mask) if name in ours else (q, k, v, attn_mask, scale)
            row = measure(name, fn, call_args, ref, tol, args.rep_ms)
            if "ms" in row:
                row["wall_us"] = wall_us(lambda: fn(*call_args))
            rows.append(row)
            print(f"  {label} {name}: " + (f"{row['ms'] * 1e3:.1f} us, wall {row['wall_us']:.1f} us" if "ms" in row
                                           else row["error"]), flush=True)
        report_rows.append((label, shape, rows))
    text = decode_report(report_rows, env, args.dtype, spec, dtype)
    print(text, flush=True)
    if args.results:
        with args.results.open("a") as f:
            f.write("\n" + text)
    if args.json:
        args.json.write_text(json.dumps({"environment": env, "dtype": args.dtype,
                                         "cases": [{"shape": lb, "rows": rows} for lb, _, rows in report_rows]},
                                        indent=1) + "\n")
    return 0


def decode_report(cases: list, env: str, dtype_name: str, spec, dtype) -> str:
    lines = [f"### Decode attention {dtype_name}", "", env, "",
             "GPU: do_bench, L2 flushed, us median (p10-p90); wall: host us per call, 200 back to back; "
             "GB/s: the spec's bytes (K and V read once) / GPU median; x = best SDPA median / median", ""]
    for label, shape, rows in cases:
        timed = [r for r in rows if "ms" in r]
        best = min((r["ms"] for r in timed if r["name"].startswith("sdpa")), default=None)
        lines += [f"#### {label}", "", "| entry | GPU us | p10-p90 | wall us | GB/s | x best SDPA | max err |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            if "ms" not in r:
                lines.append(f"| {r['name']} | err | | | | | {r.get('error', '')} |")
                continue
            x = f"{best / r['ms']:.3f}" if best else "n/a"
            gbs = spec.bytes(shape, dtype) / (r["ms"] * 1e-3) / 1e9
            lines.append(f"| {r['name']} | {r['ms'] * 1e3:.1f} | {r['p10'] * 1e3:.1f}-{r['p90'] * 1e3:.1f} | "
                         f"{r['wall_us']:.1f} | {gbs:.0f} | {x} | {r['max_err']:.2e} |")
        lines.append("")
    return "\n".join(lines)


def run(args) -> int:
    spec = get_spec("flash_attention")
    shape = spec.parse_shape(args.shape[0] if args.shape else "4x32x32x4096x128x1")
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
    ap.add_argument("--shape", action="append",
                    help="batch x heads x kv_heads x seq x head_dim x causal [x kv_seq] (default 4x32x32x4096x128x1; "
                         "with --decode: repeatable, default B1/B32 x Hkv 32/8 x Sk 2048/8192)")
    ap.add_argument("--decode", action="store_true", help="time the decode path (one query, a long KV cache)")
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    ap.add_argument("--rep-ms", type=int, default=1000,
                    help="do_bench's rep: milliseconds of timed repetitions per entry (~90 at B4 S4096)")
    ap.add_argument("--results", type=Path, help="append the markdown report here")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    args = ap.parse_args(argv)
    for text in args.shape or ():
        try:
            get_spec("flash_attention").parse_shape(text)
        except ValueError as exc:  # a bad shape is a usage error, before any GPU work
            ap.error(str(exc))
    if not torch.cuda.is_available():
        print("attention_hopper.py needs a CUDA GPU", file=sys.stderr)
        return 2
    return run_decode(args) if args.decode else run(args)


if __name__ == "__main__":
    sys.exit(main())
