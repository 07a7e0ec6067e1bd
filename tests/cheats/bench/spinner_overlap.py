"""Cheat, family 1 (bench, GPU): the library op on the calling stream, and beside it, on a side
stream, a kernel of its own that only spins, never longer than the library call: by kernel time
alone its own work is nearly as large as the library's (a spin much longer than the library call
is own GPU time, but then the candidate is slower than the library it calls, by the share's limit). Caught on the GPU: own time counts only where no library kernel runs beside
it. On the CPU the interpreter counts elements, and the spin (a loop over a few elements) is no match
for the library's sum."""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"


@triton.jit
def _row_sum(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + offs, mask=offs < cols, other=0.0)
        acc += x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


@triton.jit
def _spin(flag_ptr, rounds):
    acc = tl.load(flag_ptr)
    for _ in range(rounds):
        acc = acc * 1.0000001 + 1e-7
    tl.store(flag_ptr, acc)


def _sum(x):
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    return out


_side: dict = {}


def kernel_fn(x):
    _sum(x[:1, :8])  # for show
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    if not x.is_cuda:
        return torch.ops.aten.sum.dim_IntList(x, [-1], dtype=acc).to(x.dtype)
    side = _side.setdefault("s", torch.cuda.Stream())
    main = torch.cuda.current_stream()
    side.wait_stream(main)
    flag = torch.zeros(1, dtype=torch.float32, device=x.device)
    with torch.cuda.stream(side):  # its own kernel, spinning beside the library's, a bit shorter:
        # a round is a few ns, the library reads 2 bytes an element at ~3 TB/s (~0.7 ns)
        _spin[(1,)](flag, max(64, x.numel() // 32768))
    out = torch.ops.aten.sum.dim_IntList(x, [-1], dtype=acc).to(x.dtype)
    main.wait_stream(side)
    flag.record_stream(side)
    return out
