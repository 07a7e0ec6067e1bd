"""Triton cross-entropy starter: mean of logsumexp(row) - row[target] over non-ignored rows.

One program per row reads the row exactly once: an online logsumexp over vocab chunks keeps a
running max m and a running sum s of exp(x - m) (rescaled when the max grows), so exp runs once
per logit (exp2 with log2(e) folded in: one FMA and one MUFU op). At 4096x32000 bf16 the read
is ~62 us on an H200 and one exp per logit is ~30 us of MUFU time, so a second exp per element
(per-lane online softmax) would make the kernel compute-bound; one max and one sum reduction per
chunk is the cheaper price. Ignored rows skip the row entirely.

Per-row losses go to an fp32 buffer and a second, single-program kernel sums them and counts
the non-ignored targets in a fixed order: deterministic, no atomics.
"""

import torch
import triton
import triton.language as tl

try:  # the lean launch path (autokernel/kernels/launcher.py); standalone, the file launches the usual way
    from autokernel.kernels.launcher import Prepared, cdiv, launch, next_power_of_2
except ImportError:
    cdiv, next_power_of_2 = triton.cdiv, triton.next_power_of_2

    def launch(kernel, grid, *args, **meta):
        return kernel[grid](*args, **meta)

    class Prepared:  # launch(kernel, grid, *tensors, *rest, **meta) with all but the tensors fixed
        def __init__(self, kernel, grid, rest=(), **meta):
            self.kernel, self.grid, self.rest, self.meta = kernel, grid, tuple(rest), meta

        def __call__(self, *tensors):
            return self.kernel[self.grid](*tensors, *self.rest, **self.meta)

KERNEL_TYPE = "cross_entropy"
BACKEND = "triton"

BLOCK_V = 8192  # logits per chunk of the online logsumexp
NUM_WARPS = 8
NUM_STAGES = 2  # software pipelining of the chunk loads
MEAN_BLOCK = 1024  # rows per step of the final fixed-order mean

SEARCH_SPACE = {
    "BLOCK_V": [1024, 2048, 4096, 8192, 16384],
    "NUM_WARPS": [4, 8, 16, 32],
    "NUM_STAGES": [1, 2, 3, 4],
    "MEAN_BLOCK": [256, 1024, 4096],
}

DETERMINISTIC = True  # per-row losses, then one program sums them in order


def valid_config(cfg):
    # At most 64 fp32 values of a chunk per thread, at least one.
    per_thread = cfg["BLOCK_V"] // (32 * cfg["NUM_WARPS"])
    return 1 <= per_thread <= 64


@triton.jit
def _ce_row_loss_kernel(logits_ptr, targets_ptr, losses_ptr, V, stride_n, stride_v, stride_t,
                        ignore_index, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_n
    tgt = tl.load(targets_ptr + row.to(tl.int64) * stride_t)
    valid = tgt != ignore_index
    # An ignored row reads nothing: its loop runs zero times.
    n_chunks = tl.where(valid, tl.cdiv(V, BLOCK), 0)
    cols = tl.arange(0, BLOCK)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.full((), 0.0, tl.float32)
    for i in range(0, n_chunks):
        offs = i * BLOCK + cols
        x = tl.load(row_ptr + offs.to(tl.int64) * stride_v, mask=offs < V, other=float("-inf"))
        x = x.to(tl.float32) * 1.4426950408889634  # base-2 logits: exp2 is the native op
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # While every logit so far is -inf (masked vocabulary), shift by 0 instead of -inf so
        # exp2(-inf - -inf) never makes a NaN; the sum simply stays 0.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp2(m - shift) + tl.sum(tl.exp2(x - shift), axis=0)
        m = m_new
    safe_t = tl.where(valid, tgt, 0)
    x_t = tl.load(row_ptr + safe_t * stride_v).to(tl.float32)
    lse = (m + tl.log2(tl.where(valid, s, 1.0))) * 0.6931471805599453  # back to natural log
    loss = tl.where(valid, lse - x_t, 0.0)
    tl.store(losses_ptr + row, loss)


@triton.jit
def _ce_mean_kernel(losses_ptr, targets_ptr, out_ptr, N, stride_t, ignore_index, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    cnt = tl.zeros((BLOCK,), tl.int32)
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < N
        acc += tl.load(losses_ptr + offs, mask=mask, other=0.0)
        t = tl.load(targets_ptr + offs.to(tl.int64) * stride_t, mask=mask, other=ignore_index)
        cnt += (t != ignore_index).to(tl.int32)
    total = tl.sum(acc, axis=0)
    count = tl.sum(cnt, axis=0)
    # No counted row: 0/0 = NaN, as torch returns.
    tl.store(out_ptr, total / count.to(tl.float32))


_PLANS = {}  # (shapes, strides, dtypes, device, ignore_index) -> the call prepared for them
_Tensor = torch.Tensor


def kernel_fn(logits, targets, ignore_index=-100):
    # At the shapes of a short prompt the two launches' GPU time is a few microseconds and the host's
    # work is the cost: block sizes, strides and the launches' fixed arguments are a function of the
    # operands' shapes, strides, dtypes and device, worked out once per such key. Tensor subclasses
    # (torch.compile tracing) always take the full path.
    if type(logits) is _Tensor and type(targets) is _Tensor:
        key = (logits.shape, logits.stride(), targets.shape, targets.stride(), logits.dtype, targets.dtype,
               logits.get_device(), ignore_index)
        plan = _PLANS.get(key)
        if plan is None:
            plan = _plan(logits, targets, ignore_index)
            if len(_PLANS) < 1024:
                _PLANS[key] = plan
        return plan(logits, targets)
    return ce_full(logits, targets, ignore_index)


def _plan(logits, targets, ignore_index):
    """A function (logits, targets) -> the mean loss, with both launches prepared for operands like
    these (ce_full where there is nothing to launch)."""
    _check(logits, targets)
    N, V = logits.shape
    if N == 0:
        return lambda logits, targets: ce_full(logits, targets, ignore_index)
    block, warps, mean_block = _blocks(N, V)
    row = Prepared(_ce_row_loss_kernel, (N,), (V, logits.stride(0), logits.stride(1), targets.stride(0),
                                               ignore_index), BLOCK=block, num_warps=warps, num_stages=NUM_STAGES)
    mean = Prepared(_ce_mean_kernel, (1,), (N, targets.stride(0), ignore_index),
                    BLOCK=mean_block, num_warps=max(1, min(8, mean_block // 32)))
    device = logits.device
    f32 = torch.float32

    def run(logits, targets):
        losses = torch.empty((N,), device=device, dtype=f32)
        out = torch.empty((), device=device, dtype=f32)
        row(logits, targets, losses)
        mean(losses, targets, out)
        return out
    return run


def _check(logits, targets):
    assert logits.dim() == 2 and targets.dim() == 1 and targets.shape[0] == logits.shape[0]


def _blocks(N, V):
    block = min(BLOCK_V, next_power_of_2(V))
    return block, max(1, min(NUM_WARPS, block // 32)), min(MEAN_BLOCK, next_power_of_2(N))


def ce_full(logits, targets, ignore_index=-100):
    """kernel_fn's every step, worked out afresh at each call."""
    _check(logits, targets)
    N, V = logits.shape
    losses = torch.empty((N,), device=logits.device, dtype=torch.float32)
    out = torch.empty((), device=logits.device, dtype=torch.float32)
    if N == 0:
        return out.fill_(float("nan"))
    block, warps, mean_block = _blocks(N, V)
    launch(_ce_row_loss_kernel, (N,),
        logits, targets, losses, V, logits.stride(0), logits.stride(1), targets.stride(0), ignore_index,
        BLOCK=block, num_warps=warps, num_stages=NUM_STAGES,
    )
    launch(_ce_mean_kernel, (1,),
        losses, targets, out, N, targets.stride(0), ignore_index,
        BLOCK=mean_block, num_warps=max(1, min(8, mean_block // 32)),
    )
    return out
