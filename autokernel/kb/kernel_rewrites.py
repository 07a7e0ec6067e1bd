"""Rewrites of a traced graph into calls that one generated kernel family computes whole:
- nn.GRU / nn.LSTM -> rnn_forward (templates/rnn.py, KernelBench L3 35-42: otherwise the whole
  problem stays cuDNN's);
- torch.triu / tril of the matmul of two triangular matrices -> tri_matmul (templates/trimm.py);
- the mean over all spatial dims of a transposed convolution without padding (a global average
  pool after it) -> conv_mean (templates/convmean.py);
- an exclusive cumulative sum written as a cat of zeros and the cumsum of all but the last
  element -> exclusive_cumsum (the row scan's exclusive mode, templates/scan.py);
- the sum or mean over the output features of a GEMM scaled and shifted on the way -> gemm_sum
  (templates/gemmsum.py).
Each call is the reference itself (shapes propagate through it); the emitter writes it as `_kb_rnn`
/ `_kb_trimm` / `_kb_convmean` / `_kb_scan(..., exclusive=True)` / `_kb_gemmsum`.
"""

from __future__ import annotations


def rnn_forward(x, hx, module, lstm: bool):
    """The module's own forward (the reference); on the meta device only its output shapes (the
    meta GRU walks every step in Python: seconds at KernelBench's sizes)."""
    import torch

    if not x.is_meta:
        return module(x, hx)
    D = 2 if module.bidirectional else 1
    T, B = (x.shape[1], x.shape[0]) if module.batch_first and x.dim() == 3 else (x.shape[0], x.shape[1:2])
    B = tuple(B) if isinstance(B, torch.Size) else (B,)
    out_shape = ((B[0], T) if module.batch_first and x.dim() == 3 else (T, *B)) + (D * module.hidden_size,)
    out = torch.empty(out_shape, device="meta", dtype=x.dtype)
    h = torch.empty((module.num_layers * D, *B, module.hidden_size), device="meta", dtype=x.dtype)
    return (out, (h, torch.empty_like(h))) if lstm else (out, h)


def rnn_launches(gm, node) -> int:
    """Kernel launches of one rnn_forward node: per layer, the input projection and a step kernel per
    time step (both directions in one launch)."""
    from autokernel.kb.fx_nodes import node_shape

    x, mod = node.args[0], gm.get_submodule(node.args[2].target)
    shape = node_shape(x) or (1,)
    steps = shape[1] if mod.batch_first and len(shape) == 3 else shape[0]
    return (steps + 1) * mod.num_layers


def rewrite_rnns(gm) -> bool:
    """nn.GRU / nn.LSTM calls with fp32 weights (no dropout between layers, no projection) ->
    rnn_forward(x, hx, module, lstm). True when anything changed."""
    import torch
    import torch.nn as nn

    from autokernel.kb.fx_nodes import rewrite_nodes

    def build(g, node):
        if node.op != "call_module" or node.kwargs or not 1 <= len(node.args) <= 2:
            return None
        mod = gm.get_submodule(node.target)
        if type(mod) not in (nn.GRU, nn.LSTM) or (mod.dropout and mod.num_layers > 1) \
                or getattr(mod, "proj_size", 0):
            return None
        # fp32 weights: x is fp32 too (torch's RNNs refuse other inputs); run before shape propagation
        if any(p.dtype != torch.float32 for p in mod.parameters()):
            return None
        hx = node.args[1] if len(node.args) > 1 else None
        return g.call_function(rnn_forward, (node.args[0], hx, g.get_attr(node.target), type(mod) is nn.LSTM))

    return rewrite_nodes(gm, build)


def tri_matmul(a, b, upper: bool):
    """The reference: torch.triu(a @ b) (tril without `upper`)."""
    import torch

    c = torch.matmul(a, b)
    return torch.triu(c) if upper else torch.tril(c)


def rewrite_triangular(gm) -> bool:
    """torch.triu / tril (diagonal 0) of the matmul of two square fp32 matrices -> tri_matmul."""
    import torch

    from autokernel.kb.fx_nodes import fn_name, node_shape, rewrite_nodes

    def build(g, node):
        if node.op != "call_function" or node.target not in (torch.triu, torch.tril) or len(node.args) != 1 \
                or node.kwargs:
            return None
        mm = node.args[0]
        if getattr(mm, "op", None) != "call_function" or fn_name(mm.target) not in ("matmul", "mm") \
                or len(mm.args) != 2 or mm.kwargs or len(mm.users) != 1:
            return None
        a, b = mm.args
        sa, sb = node_shape(a), node_shape(b)
        if sa is None or len(sa) != 2 or sa[0] != sa[1] or sa != sb \
                or any(t.meta["tensor_meta"].dtype != torch.float32 for t in (a, b)):
            return None
        return g.call_function(tri_matmul, (a, b, node.target is torch.triu))

    changed = rewrite_nodes(gm, build)
    if changed:  # the matmuls the rewrite folded in
        for node in reversed(list(gm.graph.nodes)):
            if node.op == "call_function" and fn_name(node.target) in ("matmul", "mm") and not node.users:
                gm.graph.erase_node(node)
        gm.recompile()
    return changed


def conv_mean(x, weight, bias, stride, dilation, output_padding, groups, keepdim: bool):
    """The reference: the transposed convolution without padding, then its mean over every spatial dim."""
    import torch.nn.functional as F

    nd = weight.dim() - 2
    fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nd - 1]
    y = fn(x, weight, bias, stride, 0, output_padding, groups, dilation)
    return y.mean(dim=tuple(range(2, 2 + nd)), keepdim=keepdim)


def _reduced_dims(node, ndim: int) -> tuple[tuple, bool] | None:
    """(the dims, sorted and non-negative, keepdim) of a sum or mean node (torch.sum / mean, x.sum /
    mean) of an ndim-dim tensor over one dim or a list of them, with no argument but dim and keepdim;
    else None. The conv-mean and GEMM-sum rewrites both match their reduction with it."""
    from autokernel.kb.fx_nodes import dim_ok, node_name

    if node.op not in ("call_function", "call_method") or node_name(node) not in ("sum", "mean") or not node.args:
        return None
    a = dict(zip(("dim", "keepdim"), node.args[1:]), **{k: v for k, v in node.kwargs.items() if k != "input"})
    dims = a.get("dim")
    dims = list(dims) if isinstance(dims, (tuple, list)) else [dims]
    keepdim = a.get("keepdim", False)
    if set(a) - {"dim", "keepdim"} or not isinstance(keepdim, bool) or not dims \
            or not all(dim_ok(d, ndim) for d in dims):
        return None
    return tuple(sorted(d % ndim for d in dims)), keepdim


def _spatial_mean(node, nd: int):
    """keepdim of a mean over all nd spatial dims of a batched nd-dim convolution's output (torch.mean,
    x.mean, nn.AdaptiveAvgPool*d(1) / F.adaptive_avg_pool*d(x, 1): keepdim True), else None."""
    import torch.nn as nn

    from autokernel.kb.fx_nodes import node_name

    def ones(size):
        return size == 1 or isinstance(size, (tuple, list)) and all(v == 1 for v in size)

    if node.op == "call_module":
        pools = {nn.AdaptiveAvgPool1d: 1, nn.AdaptiveAvgPool2d: 2, nn.AdaptiveAvgPool3d: 3}
        mod = node.graph.owning_module.get_submodule(node.target)
        taken = pools.get(type(mod)) == nd and ones(getattr(mod, "output_size", None))
        return True if taken and len(node.args) == 1 and not node.kwargs else None
    if node.op == "call_function" and getattr(node.target, "__name__", "") == f"adaptive_avg_pool{nd}d":
        a = dict(zip(("input", "output_size"), node.args), **node.kwargs)
        return True if set(a) == {"input", "output_size"} and ones(a["output_size"]) else None
    red = _reduced_dims(node, nd + 2)
    if node_name(node) != "mean" or red is None or red[0] != tuple(range(2, nd + 2)):
        return None
    return red[1]


def rewrite_conv_means(gm) -> bool:
    """The mean over every spatial dim of a transposed convolution with zero padding whose only use
    it is -> conv_mean (after shape propagation: the input must be a batched float tensor)."""
    from autokernel.kb.fallback_rules import conv_args
    from autokernel.kb.fx_nodes import node_shape, rewrite_nodes

    def build(g, node):
        x = node.args[0] if node.args else node.kwargs.get("input")
        if getattr(x, "op", None) not in ("call_module", "call_function") or len(x.users) != 1:
            return None
        a = conv_args(gm, x)
        if not a or not a.get("transposed"):
            return None
        # the dims convolved: the kernel's (an unbatched input has one dim fewer than nd + 2)
        nd = len(gm.get_submodule(x.target).kernel_size) if x.op == "call_module" else len(node_shape(a["weight"])) - 2
        pad = a.get("padding", 0)
        if any(v != 0 for v in (pad if isinstance(pad, (tuple, list)) else (pad,))) \
                or len(node_shape(a["x"]) or ()) != nd + 2 or len(node_shape(x) or ()) != nd + 2:
            return None
        keepdim = _spatial_mean(node, nd)
        if keepdim is None:
            return None
        if x.op == "call_module":  # conv_args took it: an nn.ConvTranspose1d / 2d / 3d
            weight = g.get_attr(f"{x.target}.weight")
            bias = g.get_attr(f"{x.target}.bias") if a["bias"] is not None else None
        else:
            weight, bias = a["weight"], a.get("bias")
        hyper = [a.get(k, d) for k, d in (("stride", 1), ("dilation", 1), ("output_padding", 0), ("groups", 1))]
        return g.call_function(conv_mean, (a["x"], weight, bias, *hyper, keepdim)), (x,)

    return rewrite_nodes(gm, build)


def exclusive_cumsum(x, dim: int):
    """The reference: torch.cat([zeros of x's shape with size 1 at dim, x.narrow(dim, 0, n - 1).cumsum(dim)], dim)."""
    import torch

    n = x.shape[dim]
    head = torch.zeros_like(x.narrow(dim, 0, min(n, 1)))
    return torch.cat([head, torch.cumsum(x.narrow(dim, 0, max(n - 1, 0)), dim)], dim)


def rewrite_exclusive_cumsums(gm) -> bool:
    """torch.cat([torch.zeros_like(t), torch.cumsum(x.narrow(d, 0, n - 1), d)], d), t of x's shape
    with size 1 at d (KernelBench L1 92), -> exclusive_cumsum(x, d): one pass of the scan writes the
    output, instead of a scan, the zeros and the cat copying both (after shape propagation)."""
    import torch

    from autokernel.kb.fx_nodes import dim_ok, fn_name, is_float_tensor, node_name, node_shape, rewrite_nodes

    def build(g, node):
        if node.op != "call_function" or node.target is not torch.cat or not node.args:
            return None
        a = dict(zip(("tensors", "dim"), node.args), **node.kwargs)
        parts, d = a.get("tensors"), a.get("dim", 0)
        if set(a) - {"tensors", "dim"} or not isinstance(parts, (list, tuple)) or len(parts) != 2:
            return None
        zeros, cs = parts
        if getattr(cs, "op", None) != "call_function" or fn_name(cs.target) != "cumsum" or len(cs.users) != 1:
            return None
        ck = dict(zip(("input", "dim"), cs.args), **cs.kwargs)
        nar = ck.get("input")
        if set(ck) != {"input", "dim"} or getattr(nar, "op", None) not in ("call_method", "call_function") \
                or node_name(nar) != "narrow" or len(nar.users) != 1:
            return None
        nk = dict(zip(("input", "dim", "start", "length"), nar.args), **nar.kwargs)
        x = nk.get("input")
        shape, out = node_shape(x), node_shape(node)
        if not is_float_tensor(x) or shape is None or not dim_ok(d, len(shape)) or nk.get("start") != 0 \
                or not dim_ok(ck["dim"], len(shape)) or not dim_ok(nk.get("dim"), len(shape)):
            return None
        d %= len(shape)
        if ck["dim"] % len(shape) != d or nk["dim"] % len(shape) != d or out != shape or shape[d] < 1:
            return None
        # the head: zeros of x's shape with size 1 at d and x's dtype (its values known: zeros_like)
        head = list(shape)
        head[d] = 1
        if getattr(zeros, "op", None) != "call_function" or zeros.target is not torch.zeros_like \
                or len(zeros.args) != 1 or zeros.kwargs or len(zeros.users) != 1 \
                or node_shape(zeros) != tuple(head) \
                or zeros.meta["tensor_meta"].dtype != x.meta["tensor_meta"].dtype:
            return None
        roots.extend(n for f in (nar, zeros) for n in f.all_input_nodes if n is not x)
        return g.call_function(exclusive_cumsum, (x, d)), (cs, nar, zeros)

    roots: list = []
    changed = rewrite_nodes(gm, build)
    if changed:
        _drop_dead_metadata(gm, roots)
    return changed


def _drop_dead_metadata(gm, roots) -> None:
    """What folded nodes alone used, where it only computed sizes or views (x.size(d) - 1, the
    select the zeros were shaped after): erased, and what those alone used, in turn."""
    from autokernel.kb.replay import launches_nothing

    todo, erased = list(roots), set()
    while todo:
        n = todo.pop()
        if n in erased or n.users or n.op not in ("call_method", "call_function"):
            continue
        if launches_nothing(gm, n) or n.meta.get("type") in (int, float):
            todo.extend(n.all_input_nodes)
            gm.graph.erase_node(n)
            erased.add(n)
    gm.recompile()


def gemm_sum(x, b, scale: float, terms: tuple, mean: bool, keepdim: bool, linear: bool):
    """The reference: (scale * (x @ B) + sum of coef * t over terms).sum(-1) (.mean with `mean`),
    B = b.t() for a linear's weight (`linear`), else b."""
    y = (x @ (b.t() if linear else b)) * scale
    for coef, t in terms:
        y = y + coef * t
    return y.mean(-1, keepdim=keepdim) if mean else y.sum(-1, keepdim=keepdim)


def _affine_step(node, chain_shape):
    """(op, operand, chain input) of a node that scales the chain by a number (mul, truediv) or
    shifts it (add, sub, the chain on either side) by a number or a tensor of one value per last-dim
    feature (or one value); else None."""
    from autokernel.kb.fx_nodes import fn_name, is_number, node_shape

    if node.op != "call_function" or node.kwargs or len(node.args) != 2:
        return None
    op = fn_name(node.target)
    p, q = node.args

    def chain(a):
        return node_shape(a) == chain_shape

    def shift_ok(t):
        shape = node_shape(t)
        return is_number(t) or shape is not None and shape in ((), (1,), (chain_shape[1],), (1, chain_shape[1]))

    if op in ("mul", "truediv") and chain(p) and is_number(q) and not (op == "truediv" and q == 0):
        return op, q, p
    if op == "mul" and chain(q) and is_number(p):
        return op, p, q
    if op in ("add", "sub") and chain(p) and not chain(q) and shift_ok(q):
        return op, q, p
    if op in ("add", "sub") and chain(q) and not chain(p) and shift_ok(p):
        return "r" + op, p, q
    return None


def rewrite_gemm_sums(gm) -> bool:
    """x.sum(-1) / x.mean(-1) over the output features of a 2-D GEMM (F.linear, torch.matmul / mm,
    @) reached through scalings by numbers and shifts by per-feature tensors or numbers, each node
    of the chain used only by the next -> gemm_sum (after shape propagation)."""
    from autokernel.kb.fx_nodes import is_float_tensor, node_name, node_shape, rewrite_nodes

    def build(g, node):
        red = _reduced_dims(node, 2)
        if red is None or red[0] != (1,):
            return None
        y, keepdim = node.args[0], red[1]
        shape = node_shape(y)
        if not is_float_tensor(y) or shape is None or len(shape) != 2:
            return None
        chain, steps, cur = [], [], y
        while True:
            if len(cur.users) != 1:
                return None
            chain.append(cur)
            name = node_name(cur)
            if name in ("linear", "matmul", "mm") and cur.op == "call_function" and not cur.kwargs:
                break
            step = _affine_step(cur, shape)
            if step is None:
                return None
            steps.append(step[:2])
            cur = step[2]
        gemm = chain[-1]
        x, b = gemm.args[:2] if len(gemm.args) in (2, 3) else (None, None)
        linear = node_name(gemm) == "linear"
        bias = gemm.args[2] if linear and len(gemm.args) == 3 else None
        if not linear and len(gemm.args) != 2 or not is_float_tensor(x) or not is_float_tensor(b) \
                or len(node_shape(x)) != 2 or len(node_shape(b)) != 2 \
                or x.meta["tensor_meta"].dtype != y.meta["tensor_meta"].dtype:
            return None
        scale, terms = 1.0, [(1.0, bias)] if bias is not None else []
        for op, v in reversed(steps):  # applied in the forward's order
            if op in ("mul", "truediv"):
                f = v if op == "mul" else 1.0 / v
                scale, terms = scale * f, [(c * f, t) for c, t in terms]
            elif op in ("add", "sub"):
                terms.append((1.0 if op == "add" else -1.0, v))
            else:  # v + chain keeps it; v - chain negates it
                if op == "rsub":
                    scale, terms = -scale, [(-c, t) for c, t in terms]
                terms.append((1.0, v))
        args = (x, b, scale, tuple(terms), node_name(node) == "mean", keepdim, linear)
        return g.call_function(gemm_sum, args), tuple(chain)

    return rewrite_nodes(gm, build)
