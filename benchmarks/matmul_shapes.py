"""The Triton matmul starter at KernelBench level 1's GEMM shapes (fp32, TF32 off, as KernelBench's
reference runs) and at the LLaMA-7B bf16 shapes, against eager `a @ b` (cuBLAS) and torch.compile of
the same function, all timed in this one process: triton's do_bench (L2 flushed between
repetitions), median and the 20th-80th percentile spread. Each starter result is checked with
KernelBench's allclose (atol = rtol = 1e-4 for fp32, 1e-2 for bf16) against eager.

    python benchmarks/matmul_shapes.py [--only kb|llama] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
from autokernel.kernelfile import import_kernel, read_kernel_file  # noqa: E402
from autokernel.kernels import starter_path  # noqa: E402

# (label, M, K, N, dtype): KernelBench level 1 problems 1, 4, 6, 7, 8, 9 at their official sizes
KB_SHAPES = [
    ("L1 1 square", 4096, 4096, 4096, torch.float32),
    ("L1 4 matrix-vector", 2048, 1048576, 1, torch.float32),
    ("L1 6 large K", 256, 524288, 256, torch.float32),
    ("L1 7 small K", 32768, 64, 32768, torch.float32),
    ("L1 8 irregular", 8205, 2949, 5921, torch.float32),
    ("L1 9 tall-skinny", 32768, 32, 32768, torch.float32),
]
LLAMA_SHAPES = [
    ("qkv/o 2048x4096x4096", 2048, 4096, 4096, torch.bfloat16),
    ("up 2048x4096x11008", 2048, 4096, 11008, torch.bfloat16),
    ("down 2048x11008x4096", 2048, 11008, 4096, torch.bfloat16),
    ("lm head 2048x4096x32000", 2048, 4096, 32000, torch.bfloat16),
    ("4096^3", 4096, 4096, 4096, torch.bfloat16),
]


def timed(fn) -> tuple[float, float, float]:
    return tuple(do_bench(fn, warmup=25, rep=200, quantiles=[0.5, 0.2, 0.8]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["kb", "llama"])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mm = import_kernel(read_kernel_file(starter_path("matmul", "triton")))
    shapes = {"kb": KB_SHAPES, "llama": LLAMA_SHAPES}.get(args.only, KB_SHAPES + LLAMA_SHAPES)
    lines = [f"Device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
             f"{__import__('triton').__version__}; do_bench median (p20-p80) ms, L2 flushed.", "",
             "| shape | M x K x N | dtype | allclose | starter ms | eager ms | compile ms | TFLOP/s | x eager | x compile |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for label, m, k, n, dtype in shapes:
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.rand(m, k, device="cuda", generator=gen).to(dtype)
        b = torch.rand(k, n, device="cuda", generator=gen).to(dtype)
        if dtype == torch.bfloat16:  # a weight's .t() view, what nn.Linear hands the GEMM
            b = torch.rand(n, k, device="cuda", generator=gen).to(dtype).t()
        eager = lambda: a @ b  # noqa: E731
        compiled = torch.compile(lambda x, y: x @ y)
        tol = 1e-4 if dtype == torch.float32 else 1e-2
        ok = torch.allclose(mm.kernel_fn(a, b), eager(), atol=tol, rtol=tol)
        ts, te, tc = timed(lambda: mm.kernel_fn(a, b)), timed(eager), timed(lambda: compiled(a, b))
        tflops = 2 * m * n * k / ts[0] / 1e9
        line = (f"| {label} | {m}x{k}x{n} | {str(dtype).removeprefix('torch.')} | {'yes' if ok else 'NO'} | "
                f"{ts[0]:.3f} ({ts[1]:.3f}-{ts[2]:.3f}) | {te[0]:.3f} | {tc[0]:.3f} | {tflops:.1f} | "
                f"{te[0] / ts[0]:.2f} | {tc[0] / ts[0]:.2f} |")
        lines.append(line)
        print(line, flush=True)
        del a, b
        torch.cuda.empty_cache()
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
