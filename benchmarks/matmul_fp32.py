"""fp32 GEMM on the GPU: cuBLAS (TF32 off, what KernelBench's fp32 reference runs) vs the Triton
matmul starter with FP32_PRECISION "ieee" (CUDA-core FMA) and "tf32x3" (three TF32 tensor-core
passes) at a few tile configs, with each result's KernelBench allclose ratio
max|out - ref| / (1e-4 + 1e-4 |ref|) against cuBLAS (<= 1 passes). Median of triton's do_bench
(L2 flushed between repetitions). Prints one line per config.

    python benchmarks/matmul_fp32.py [M N K]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
from autokernel.kernelfile import import_kernel, read_kernel_file  # noqa: E402
from autokernel.kernels import starter_path  # noqa: E402

CONFIGS = [("ieee", 64, 128, 32, 8, 3), ("tf32x3", 64, 128, 32, 8, 3), ("tf32x3", 128, 128, 32, 8, 3),
           ("tf32x3", 128, 128, 32, 4, 3), ("tf32x3", 128, 256, 32, 8, 2), ("tf32x3", 128, 128, 64, 8, 2),
           ("tf32x3", 256, 128, 32, 8, 2)]


def main() -> None:
    m, n, k = (int(v) for v in sys.argv[1:4]) if len(sys.argv) >= 4 else (4096, 4096, 4096)
    torch.backends.cuda.matmul.allow_tf32 = False
    mm = import_kernel(read_kernel_file(starter_path("matmul", "triton")))
    a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    ref = a @ b
    tflops = lambda ms: 2 * m * n * k / ms / 1e9  # noqa: E731
    ratio = lambda x: float(((x - ref).abs() / (1e-4 + 1e-4 * ref.abs())).max())  # noqa: E731
    t = do_bench(lambda: a @ b, warmup=50, rep=300)
    print(f"{m}x{n}x{k} fp32 on {torch.cuda.get_device_name()}")
    print(f"cuBLAS fp32                 {t:.3f} ms {tflops(t):6.1f} TFLOP/s")
    for prec, bm, bn, bk, w, st in CONFIGS:
        mm.FP32_PRECISION, mm.FP32_BLOCK_M, mm.FP32_BLOCK_N, mm.FP32_BLOCK_K = prec, bm, bn, bk
        mm.FP32_NUM_WARPS, mm.FP32_NUM_STAGES = w, st
        try:
            out = mm.kernel_fn(a, b)
            t = do_bench(lambda: mm.kernel_fn(a, b), warmup=20, rep=200)
            print(f"{prec:7s} {bm}x{bn}x{bk} w{w} s{st}  {t:.3f} ms {tflops(t):6.1f} TFLOP/s  "
                  f"allclose ratio {ratio(out):.3f}", flush=True)
        except Exception as exc:  # a config over the shared-memory limit says so and the rest go on
            print(f"{prec:7s} {bm}x{bn}x{bk} w{w} s{st}  FAILED {type(exc).__name__}: {str(exc)[:120]}", flush=True)


if __name__ == "__main__":
    main()
