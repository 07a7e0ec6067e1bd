"""Where the host time of a lean launch goes, on a GPU host: Triton's own launch, the lean path
(autokernel/kernels/launcher.py), its parts, an output allocation and the matmul starter at 3x5x1.

    python3 benchmarks/launch_parts.py        (RESULTS.md, tenth session)
"""
import statistics
import time

import torch
import triton
import triton.language as tl

from autokernel.kernels import launcher

@triton.jit
def _empty(x_ptr):
    pass

@triton.jit
def _many(a, b, c, M, N, K, s0, s1, s2, s3, s4, s5, s6, s7, s8, k2, mn, lc, BM: tl.constexpr, BN: tl.constexpr,
          BK: tl.constexpr, GROUP: tl.constexpr, EVEN_K: tl.constexpr):
    pass

def per(fn, reps=2000):
    r = []
    for _ in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        r.append((time.perf_counter() - t0) / reps * 1e6)
    torch.cuda.synchronize()
    return statistics.median(r), min(r)

x = torch.empty(16, device="cuda")
a = torch.empty((3, 1), device="cuda", dtype=torch.bfloat16); b = torch.empty((1, 5), device="cuda", dtype=torch.bfloat16)
c = torch.empty((3, 5), device="cuda", dtype=torch.bfloat16)
args = (a, b, c, 3, 5, 1, 1, 1, 5, 1, 5, 1, 0, 0, 0, 64, 0, 5)
meta = dict(BM=64, BN=64, BK=32, GROUP=8, EVEN_K=False)
_empty[(1,)](x); launcher.launch(_empty, (1,), x); _many[(1,)](*args, **meta); launcher.launch(_many, (1,), *args, **meta)
launcher.launch(_many, (1,), *args, **meta)
key = next(k for k in launcher._cache if k[0] == id(_many))
compiled, tail, _kernel = launcher._cache[key]
stream = torch.cuda.current_stream().cuda_stream
prepared = launcher.Prepared(_many, (1,), args[3:], **meta)
prepared(a, b, c); prepared(a, b, c)
rows = {
    "empty plain kernel[grid]()": lambda: _empty[(1,)](x),
    "empty lean launch": lambda: launcher.launch(_empty, (1,), x),
    "18-arg plain": lambda: _many[(1,)](*args, **meta),
    "18-arg lean launch": lambda: launcher.launch(_many, (1,), *args, **meta),
    "18-arg Prepared launch": lambda: prepared(a, b, c),
    "18-arg compiled.run only": lambda: compiled.run(1, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *args, *tail),
    "signature key (18 args)": lambda: launcher._signature_key(args),
    "torch.empty((3,5)) cuda": lambda: torch.empty((3, 5), device=a.device, dtype=a.dtype),
    "current stream getter": lambda: launcher._triton["stream"](0),
    "torch.compiler.is_compiling": lambda: torch.compiler.is_compiling(),
    "6 stride calls": lambda: (a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)),
    "torch.mm 3x1x5 eager": lambda: torch.mm(a, b),
}
for name, fn in rows.items():
    med, mn = per(fn)
    print(f"{name:32s} median {med:6.2f} us   min {mn:6.2f} us", flush=True)
import autokernel.kernels.matmul.triton_starter as mm
mm.kernel_fn(a, b)
print(f"{'matmul starter kernel_fn 3x5x1':32s} median {per(lambda: mm.kernel_fn(a, b))[0]:6.2f} us")
