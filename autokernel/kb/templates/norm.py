"""The generated normalisation kernels: the statistics of nn.BatchNorm1d/2d/3d,
nn.InstanceNorm1d/2d/3d, nn.GroupNorm and (next to another library starter) nn.LayerNorm, as
per-channel (or per-row) mean, scale and shift tensors that the elementwise kernels apply:
norm_rewrites.py turns the module into `_kb_norm_stats` followed by (x - mean) * scale + shift,
so the normalisation's only pass that writes a tensor of x's size is fused with whatever
elementwise ops follow it (the ReLU after a BatchNorm, a residual add).

Every case is x viewed as [outer, G, inner] with one statistic per group g over its outer * inner
elements: BatchNorm (outer N, G = C, inner the spatial size), InstanceNorm (outer 1, G = N * C),
GroupNorm (outer 1, G = N * groups, inner C / groups * spatial), LayerNorm (outer 1, G rows, inner
the normalized size). A group's elements are split over programs (NORM_PROGRAMS in all), each
keeping an exact fp32 (count, mean, M2) summary merged tile by tile (Chan et al.), so a group of
16 M elements loses nothing to a long running sum; a finishing kernel merges the splits, writes
mean, rstd * weight and bias per channel (per (n, c) for instance and group norm), and, for a
BatchNorm in training, updates running_mean / running_var / num_batches_tracked as torch does.
A BatchNorm in eval mode reads its running statistics: one launch.
"""

import torch
import triton
import triton.language as tl

from autokernel.kb.templates.launch import cdiv, launch, next_power_of_2

# ---- generated normalisation statistics (autokernel kb): batch / instance / group / layer norm ----
NORM_BLOCK = 4096  # elements a statistics program holds per tile
NORM_PROGRAMS = 1024  # a group's elements are split over programs until about this many run
NORM_WARPS = 8


@triton.jit
def _kb_chan(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    # merge two (count, mean, M2) summaries (Chan et al.): exact in fp32 for any group size
    n = n_a + n_b
    d = mean_b - mean_a
    w = n_b / tl.maximum(n, 1.0)
    return n, mean_a + d * w, m2_a + m2_b + d * d * n_a * w


@triton.jit
def _kb_stats_kernel(x_ptr, part_ptr, G, outer, inner, chunks, per_split, SPLIT,
                     RB: tl.constexpr, IB: tl.constexpr):
    # group g of x viewed as [outer, G, inner]: this program reduces work items
    # [s * per_split, (s + 1) * per_split) of (a block of RB outer rows, a chunk of IB inner columns)
    g = tl.program_id(0)
    s = tl.program_id(1)
    rows = tl.arange(0, RB)
    cols = tl.arange(0, IB)
    n_acc = 0.0
    mean_acc = 0.0
    m2_acc = 0.0
    items = tl.cdiv(outer, RB) * chunks
    start = s * per_split
    for w in range(start, tl.minimum(start + per_split, items)):
        ob = w // chunks
        o = ob * RB + rows
        i = (w - ob * chunks) * IB + cols
        m = (o < outer)[:, None] & (i < inner)[None, :]
        off = (o.to(tl.int64)[:, None] * G + g) * inner + i[None, :]
        v = tl.load(x_ptr + off, mask=m, other=0.0).to(tl.float32)
        cnt = tl.sum(tl.sum(m.to(tl.float32), 1), 0)
        bmean = tl.sum(tl.sum(v, 1), 0) / tl.maximum(cnt, 1.0)
        d = tl.where(m, v - bmean, 0.0)
        n_acc, mean_acc, m2_acc = _kb_chan(n_acc, mean_acc, m2_acc, cnt, bmean, tl.sum(tl.sum(d * d, 1), 0))
    p = part_ptr + (g * SPLIT + s) * 3
    tl.store(p, n_acc)
    tl.store(p + 1, mean_acc)
    tl.store(p + 2, m2_acc)


@triton.jit
def _kb_colstats_kernel(x_ptr, part_ptr, G, outer, per_split, SPLIT, RB: tl.constexpr, GB: tl.constexpr):
    # inner == 1 (a BatchNorm1d of [N, C]): x is [outer, G], GB groups side by side per program
    # (coalesced along G), rows [s * per_split, (s + 1) * per_split)
    g = tl.program_id(0) * GB + tl.arange(0, GB)
    s = tl.program_id(1)
    gm = g < G
    n_acc = tl.zeros([GB], tl.float32)
    mean_acc = tl.zeros([GB], tl.float32)
    m2_acc = tl.zeros([GB], tl.float32)
    end = tl.minimum((s + 1) * per_split, outer)
    for o0 in range(s * per_split, end, RB):
        o = o0 + tl.arange(0, RB)
        m = (o < end)[:, None] & gm[None, :]
        v = tl.load(x_ptr + o.to(tl.int64)[:, None] * G + g[None, :], mask=m, other=0.0).to(tl.float32)
        cnt = tl.sum(m.to(tl.float32), 0)
        bmean = tl.sum(v, 0) / tl.maximum(cnt, 1.0)
        d = tl.where(m, v - bmean[None, :], 0.0)
        n_acc, mean_acc, m2_acc = _kb_chan(n_acc, mean_acc, m2_acc, cnt, bmean, tl.sum(d * d, 0))
    p = part_ptr + (g * SPLIT + s) * 3
    tl.store(p, n_acc, mask=gm)
    tl.store(p + 1, mean_acc, mask=gm)
    tl.store(p + 2, m2_acc, mask=gm)


@triton.jit
def _kb_stats_finish_kernel(part_ptr, w_ptr, b_ptr, rm_ptr, rv_ptr, nbt_ptr, mean_ptr, scale_ptr, shift_ptr,
                            G, SPLIT, per_prog, cpg, C, eps, momentum, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                            RUNNING: tl.constexpr, UPDATE: tl.constexpr, CUMULATIVE: tl.constexpr,
                            GB: tl.constexpr, CB: tl.constexpr):
    # groups [pid * per_prog, (pid + 1) * per_prog), GB at a time; output j of group g is channel
    # (g * cpg + j) % C of its sample. UPDATE runs as one program (per_prog = G): it reads
    # num_batches_tracked before and writes it after every group, as torch's add_(1) then factor.
    pid = tl.program_id(0)
    if UPDATE:
        nb = tl.load(nbt_ptr)
        if CUMULATIVE:
            f = 1.0 / (nb + 1).to(tl.float32)
        else:
            f = momentum
    j = tl.arange(0, CB)
    for g0 in range(pid * per_prog, tl.minimum((pid + 1) * per_prog, G), GB):
        g = g0 + tl.arange(0, GB)
        gm = g < G
        if RUNNING:  # BatchNorm in eval mode: cpg == 1, g is the channel
            mean = tl.load(rm_ptr + g, mask=gm, other=0.0).to(tl.float32)
            var = tl.load(rv_ptr + g, mask=gm, other=1.0).to(tl.float32)
        else:
            n = tl.zeros([GB], tl.float32)
            mean = tl.zeros([GB], tl.float32)
            m2 = tl.zeros([GB], tl.float32)
            for s in range(0, SPLIT):
                p = part_ptr + (g.to(tl.int64) * SPLIT + s) * 3
                n, mean, m2 = _kb_chan(n, mean, m2, tl.load(p, mask=gm, other=0.0), tl.load(p + 1, mask=gm, other=0.0),
                                       tl.load(p + 2, mask=gm, other=0.0))
            var = m2 / tl.maximum(n, 1.0)
            if UPDATE:  # running statistics take the unbiased variance, as torch's
                unbiased = m2 / tl.maximum(n - 1.0, 1.0)
                rm = tl.load(rm_ptr + g, mask=gm, other=0.0).to(tl.float32)
                rv = tl.load(rv_ptr + g, mask=gm, other=0.0).to(tl.float32)
                tl.store(rm_ptr + g, ((1.0 - f) * rm + f * mean).to(rm_ptr.dtype.element_ty), mask=gm)
                tl.store(rv_ptr + g, ((1.0 - f) * rv + f * unbiased).to(rv_ptr.dtype.element_ty), mask=gm)
        rstd = 1.0 / tl.sqrt(var + eps)
        out = g.to(tl.int64)[:, None] * cpg + j[None, :]
        om = gm[:, None] & (j < cpg)[None, :]
        c = out % C
        scale = rstd[:, None] + tl.zeros([GB, CB], tl.float32)
        if HAS_W:
            scale = scale * tl.load(w_ptr + c, mask=om, other=1.0).to(tl.float32)
        tl.store(mean_ptr + out, mean[:, None] + tl.zeros([GB, CB], tl.float32), mask=om)
        tl.store(scale_ptr + out, scale, mask=om)
        if HAS_B:
            tl.store(shift_ptr + out, tl.load(b_ptr + c, mask=om, other=0.0).to(tl.float32), mask=om)
    if UPDATE:
        if pid == 0:
            tl.store(nbt_ptr, nb + 1)


def _kb_norm_stats(x, module, kind, dims=0):
    """(mean, scale[, shift]) broadcasting against x, with (x - mean) * scale + shift the
    normalisation `kind` (batch | instance | group | layer over the last `dims` dims) that
    `module` computes; fp32. A BatchNorm in training updates its running statistics."""
    nd = x.dim()
    x = x.contiguous()
    if kind == "layer":
        inner = x.shape[nd - dims:].numel()
        outer, G, cpg, C = 1, x.numel() // max(inner, 1), 1, 1
        shape = tuple(x.shape[:nd - dims]) + (1,) * dims
    else:
        N, C = x.shape[0], x.shape[1]
        S = x.shape[2:].numel()
        if kind == "batch":
            outer, G, inner, cpg = N, C, S, 1
            shape = (C,) + (1,) * (nd - 2)
        elif kind == "instance":
            outer, G, inner, cpg = 1, N * C, S, 1
            shape = (N, C) + (1,) * (nd - 2)
        else:
            cpg = C // module.num_groups
            outer, G, inner = 1, N * module.num_groups, cpg * S
            shape = (N, C) + (1,) * (nd - 2)
    weight = getattr(module, "weight", None) if kind != "layer" else None
    bias = getattr(module, "bias", None) if kind != "layer" else None
    running = update = cumulative = False
    rm = rv = nbt = None
    momentum = 0.0
    if kind == "batch":
        rm, rv, nbt = module.running_mean, module.running_var, module.num_batches_tracked
        running = not module.training and rm is not None and rv is not None
        update = module.training and module.track_running_stats and rm is not None and nbt is not None
        cumulative = module.momentum is None
        momentum = 0.0 if cumulative else float(module.momentum)
    f32 = dict(device=x.device, dtype=torch.float32)
    mean = torch.empty(shape, **f32)
    scale = torch.empty(shape, **f32)
    shift = torch.empty(shape, **f32) if bias is not None else None
    split = 1
    part = mean
    if not running and x.numel():
        if inner == 1 and outer > 1:
            gb = min(64, next_power_of_2(G))
            rb = max(1, min(NORM_BLOCK // gb, next_power_of_2(outer)))
            split = max(1, min(NORM_PROGRAMS // cdiv(G, gb), cdiv(outer, rb)))
            per = cdiv(cdiv(outer, rb), split) * rb
            split = cdiv(outer, per)
            part = torch.empty(G * split * 3, **f32)
            launch(_kb_colstats_kernel, (cdiv(G, gb), split), x, part, G, outer, per, split, RB=rb, GB=gb,
                   num_warps=NORM_WARPS)
        else:
            ib = min(NORM_BLOCK, next_power_of_2(inner))
            rb = max(1, min(NORM_BLOCK // ib, next_power_of_2(outer)))
            chunks = cdiv(inner, ib)
            items = cdiv(outer, rb) * chunks
            per = cdiv(items, max(1, min(cdiv(NORM_PROGRAMS, G), items)))
            split = cdiv(items, per)
            part = torch.empty(G * split * 3, **f32)
            launch(_kb_stats_kernel, (G, split), x, part, G, outer, inner, chunks, per, split, RB=rb, IB=ib,
                   num_warps=NORM_WARPS)
    gb = 64
    per_prog = G if update else gb * 16
    eps = float(module.eps)
    dummy = mean
    launch(_kb_stats_finish_kernel, (cdiv(G, per_prog),), part, weight if weight is not None else dummy,
           bias if bias is not None else dummy, rm if rm is not None else dummy, rv if rv is not None else dummy,
           nbt if update else dummy, mean, scale, shift if shift is not None else dummy, G, split, per_prog, cpg, C,
           eps, momentum, HAS_W=weight is not None, HAS_B=bias is not None, RUNNING=running, UPDATE=update,
           CUMULATIVE=cumulative, GB=gb, CB=next_power_of_2(cpg), num_warps=4)
    return (mean, scale) if shift is None else (mean, scale, shift)


SEARCH_SPACE = {"NORM_BLOCK": [1024, 2048, 4096, 8192], "NORM_PROGRAMS": [264, 528, 1024, 2048, 4096],
                "NORM_WARPS": [2, 4, 8, 16]}


def kernel_fn(x, module, kind="batch", dims=0):
    """The file's entry function: the generated normalisation statistics."""
    return _kb_norm_stats(x, module, kind, dims)
