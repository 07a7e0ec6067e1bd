"""Normalisation modules of a traced problem rewritten as statistics plus elementwise ops:
nn.BatchNorm1d/2d/3d, nn.InstanceNorm1d/2d/3d (without running statistics), nn.GroupNorm and
nn.LayerNorm (when the layernorm starter is not the problem's main op) on fp32 inputs become

    st = norm_stats(x, module, kind, dims)          # _kb_norm_stats: templates/norm.py's kernels
    y = (x - st[0]) * st[1] [+ st[2]]               # elementwise: fused with what follows
    [y = y * weight + bias]                         # LayerNorm's affine, per column

`norm_stats` here is the reference the graph's shapes are propagated with (and the values a test
can compare the kernels with); the emitter replaces its node with `_kb_norm_stats`. Run after
shape propagation (the input's dtype decides), which the caller repeats afterwards.
"""

from __future__ import annotations

import operator

NORMS = ("batch", "instance", "group", "layer")


def norm_stats(x, module, kind: str, dims: int = 0):
    """(mean, scale[, shift]) with (x - mean) * scale + shift what `module` computes (torch ops; no
    running-statistics update: the generated kernel does that)."""
    import torch

    nd = x.dim()
    if kind == "layer":
        red = tuple(range(nd - dims, nd))
        mean = x.mean(red, keepdim=True)
        var = x.var(red, unbiased=False, keepdim=True)
        return mean, torch.rsqrt(var + module.eps)
    N, C = x.shape[0], x.shape[1]
    if kind == "batch":
        if module.training or module.running_mean is None:
            red = (0,) + tuple(range(2, nd))
            mean, var = x.mean(red), x.var(red, unbiased=False)
        else:
            mean, var = module.running_mean, module.running_var
        shape = (C,) + (1,) * (nd - 2)
    else:
        groups = module.num_groups if kind == "group" else C
        xg = x.reshape(N, groups, -1)
        mean = xg.mean(-1).repeat_interleave(C // groups, dim=1)
        var = xg.var(-1, unbiased=False).repeat_interleave(C // groups, dim=1)
        shape = (N, C) + (1,) * (nd - 2)
    scale = torch.rsqrt(var + module.eps)
    w = getattr(module, "weight", None)
    if w is not None:
        scale = scale * w
    out = (mean.reshape(shape).float(), scale.reshape(shape).float())
    b = getattr(module, "bias", None)
    if b is None:
        return out
    bs = b.float().reshape((C,) + (1,) * (nd - 2))
    return out + (bs if kind == "batch" else bs.expand(shape),)


def _kind(mod, x) -> tuple[str, int] | None:
    """(kind, dims) of a normalisation module the kernels take for input node x, else None."""
    import torch
    import torch.nn as nn

    tm = x.meta.get("tensor_meta") if hasattr(x, "meta") else None
    if tm is None or not hasattr(tm, "dtype") or tm.dtype != torch.float32:
        return None
    nd = len(tm.shape)
    t = type(mod)
    if t in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d) and nd >= 2 \
            and (mod.weight is None) == (mod.bias is None):
        return "batch", 0
    if t in (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d) and not mod.track_running_stats \
            and nd >= 3 and (mod.weight is None) == (mod.bias is None):
        return "instance", 0
    if t is nn.GroupNorm and nd >= 2 and tm.shape[1] % mod.num_groups == 0 \
            and (mod.weight is None) == (mod.bias is None):
        return "group", 0
    if t is nn.LayerNorm and len(mod.normalized_shape) <= nd \
            and tuple(tm.shape[nd - len(mod.normalized_shape):]) == tuple(mod.normalized_shape):
        return "layer", len(mod.normalized_shape)
    return None


def rewrite_norms(gm, keep=lambda node: False) -> bool:
    """Rewrite the graph's normalisation modules but those `keep` says a starter takes (a LayerNorm,
    where the layernorm starter gets the main op). True when anything changed."""
    from autokernel.kb.fx_nodes import rewrite_nodes

    def build(g, node):
        if node.op != "call_module" or len(node.args) != 1 or node.kwargs:
            return None
        mod = gm.get_submodule(node.target)
        found = _kind(mod, node.args[0])
        if found is None or keep(node):
            return None
        kind, dims = found
        x = node.args[0]
        st = g.call_function(norm_stats, (x, g.get_attr(node.target), kind, dims))
        y = g.call_function(operator.sub, (x, g.call_function(operator.getitem, (st, 0))))
        y = g.call_function(operator.mul, (y, g.call_function(operator.getitem, (st, 1))))
        if kind == "layer":
            if mod.weight is not None:
                y = g.call_function(operator.mul, (y, g.get_attr(f"{node.target}.weight")))
            if mod.bias is not None:
                y = g.call_function(operator.add, (y, g.get_attr(f"{node.target}.bias")))
        elif mod.bias is not None:
            y = g.call_function(operator.add, (y, g.call_function(operator.getitem, (st, 2))))
        return y

    return rewrite_nodes(gm, build)
