"""Rewrites of a traced problem graph before its ops are mapped to kernels: each computes the same
values as the node it replaces, in ops the rules of op_rules.py map one by one. Run before shape
propagation, so the new nodes get their tensor_meta like the others.
"""

from __future__ import annotations

import operator


def rewrite(gm) -> None:
    split_linear_bias(gm)
    decompose_losses(gm)
    decompose_norms(gm)
    gm.recompile()


def split_linear_bias(gm) -> None:
    """nn.Linear(x) -> F.linear(x, weight) + bias: the same values, and the bias add becomes an
    elementwise op that fuses with the epilogue after it (bias + ReLU + ... in one kernel)."""
    import torch.nn as nn
    import torch.nn.functional as F

    for node in list(gm.graph.nodes):
        if node.op != "call_module" or node.kwargs or len(node.args) != 1:
            continue
        mod = gm.get_submodule(node.target)
        if type(mod) is not nn.Linear:
            continue
        with gm.graph.inserting_before(node):
            w = gm.graph.get_attr(f"{node.target}.weight")
            mm = gm.graph.call_function(F.linear, (node.args[0], w))
            out = mm
            if mod.bias is not None:
                b = gm.graph.get_attr(f"{node.target}.bias")
                out = gm.graph.call_function(operator.add, (mm, b))
        node.replace_all_uses_with(out)
        gm.graph.erase_node(node)


def decompose_losses(gm) -> None:
    """F.smooth_l1_loss / mse_loss / l1_loss reduced by 'mean' or 'sum' -> the per-element loss,
    then torch.mean / torch.sum of it. torch reduces the same per-element loss, so the values are
    the same; the per-element half becomes elementwise ops (one fused kernel: mse is (p - t) ** 2,
    l1 |p - t|, smooth_l1 its own op) and the reduction the reduce starter's."""
    import torch
    import torch.nn.functional as F

    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (F.smooth_l1_loss, F.mse_loss, F.l1_loss):
            continue
        names = ("input", "target", "size_average", "reduce", "reduction")
        names += ("beta",) if node.target is F.smooth_l1_loss else ("weight",)
        a = dict(zip(names, node.args), **node.kwargs)
        # size_average / reduce are the legacy spelling of reduction, a weight scales each element:
        # left to torch
        if set(a) - set(names) or "input" not in a or "target" not in a or a.get("size_average") is not None \
                or a.get("reduce") is not None or a.get("weight") is not None \
                or a.get("reduction", "mean") not in ("mean", "sum"):
            continue
        p, t = a["input"], a["target"]
        with gm.graph.inserting_before(node):
            if node.target is F.smooth_l1_loss:
                per = gm.graph.call_function(F.smooth_l1_loss, (p, t),
                                             {"reduction": "none", "beta": a.get("beta", 1.0)})
            else:
                d = gm.graph.call_function(operator.sub, (p, t))
                per = gm.graph.call_function(operator.pow, (d, 2)) if node.target is F.mse_loss \
                    else gm.graph.call_function(torch.abs, (d,))
            out = gm.graph.call_function(torch.mean if a.get("reduction", "mean") == "mean" else torch.sum, (per,))
        node.replace_all_uses_with(out)
        gm.graph.erase_node(node)


def decompose_norms(gm) -> None:
    """torch.norm / Tensor.norm, the 2-norm of a vector or the Frobenius norm -> sqrt(sum(x * x,
    dim, keepdim)): the same values; the sum is the reduce starter's (the square fused into it
    over all of x), and x / norm over one dim becomes the L2 normalisation of norm_rules.py.
    Other orders, dtype= and out= stay torch's."""
    import torch

    fn_names = ("input", "p", "dim", "keepdim", "out", "dtype")
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in (torch.norm, torch.functional.norm):
            a = dict(zip(fn_names, node.args), **node.kwargs)
        elif node.op == "call_method" and node.target == "norm":
            a = dict(zip(("input", "p", "dim", "keepdim", "dtype"), node.args), **node.kwargs)
        else:
            continue
        p, dim, keepdim = a.get("p", "fro"), a.get("dim"), a.get("keepdim", False)
        if set(a) - set(fn_names) or "input" not in a or a.get("out") is not None or a.get("dtype") is not None \
                or not isinstance(keepdim, bool) or (dim is None and keepdim):
            continue
        # p = 2 over two dims is torch.norm's matrix (spectral) norm; Frobenius is the same sum for any dims
        if not (p == "fro" or (p in (2, 2.0, None) and (dim is None or isinstance(dim, int)))):
            continue
        x = a["input"]
        with gm.graph.inserting_before(node):
            sq = gm.graph.call_function(operator.mul, (x, x))
            total = gm.graph.call_function(torch.sum, (sq,) if dim is None else (sq, dim), {} if dim is None
                                           else {"keepdim": keepdim})
            out = gm.graph.call_function(torch.sqrt, (total,))
        node.replace_all_uses_with(out)
        gm.graph.erase_node(node)
