"""Rewrites of a traced problem graph before its ops are mapped to kernels: each computes the same
values as the node it replaces, in ops the rules of op_rules.py map one by one. Run before shape
propagation, so the new nodes get their tensor_meta like the others.
"""

from __future__ import annotations

import operator

from autokernel.kb.fx_nodes import rewrite_nodes


def rewrite(gm) -> None:
    from autokernel.kb.mha_rewrites import rewrite_encoders, rewrite_mha

    rewrite_encoders(gm)  # first: their layers' linears, norms and attentions are rewritten below
    rewrite_mha(gm)
    einsum_as_matmul(gm)
    global_pool_as_mean(gm)
    split_linear_bias(gm)
    decompose_losses(gm)
    decompose_distance_losses(gm)
    decompose_norms(gm)
    gm.recompile()


def _reduced(g, per, reduction: str, batch_of=None):
    """The per-element loss reduced as torch's `reduction` names it ('batchmean': the sum over
    the batch size, read from `batch_of` at run time)."""
    import torch

    if reduction == "mean":
        return g.call_function(torch.mean, (per,))
    total = g.call_function(torch.sum, (per,))
    if reduction == "batchmean":
        return g.call_function(operator.truediv, (total, g.call_method("size", (batch_of, 0))))
    return total


def _norm2(g, x, dim, keepdim: bool = False):
    """sqrt(sum(x * x, dim, keepdim)): the 2-norm along dim (one or several; None: all of x)."""
    import torch

    sq = g.call_function(operator.mul, (x, x))
    total = g.call_function(torch.sum, (sq,)) if dim is None else \
        g.call_function(torch.sum, (sq, dim), {"keepdim": True} if keepdim else {})
    return g.call_function(torch.sqrt, (total,))


def einsum_as_matmul(gm) -> None:
    """torch.einsum of two operands that is a matmul -> torch.matmul: A's last index contracted
    with a 2-D B's first ("bijl,lk->bijk", KernelBench L1 11) or a batched product
    ("bij,bjk->bik"); the same values, and the matmul starter takes it."""
    import torch

    def build(g, node):
        if node.op != "call_function" or node.target is not torch.einsum or node.kwargs or len(node.args) != 3 \
                or not isinstance(node.args[0], str):
            return None
        eq = node.args[0].replace(" ", "")
        if "->" not in eq or "." in eq or eq.count(",") != 1:
            return None
        ins, out = eq.split("->")
        a, b = ins.split(",")
        if len(set(a)) != len(a) or len(set(b)) != len(b) or len(set(out)) != len(out) or len(a) < 2 or len(b) < 2:
            return None
        c = a[-1]
        plain = len(b) == 2 and b[0] == c and out == a[:-1] + b[1] and b[1] not in a
        batched = len(a) == len(b) == 3 and a[0] == b[0] and b[1] == c and out == a[:2] + b[2] \
            and len(set(a + b)) == 4
        if not (plain or batched):
            return None
        return g.call_function(torch.matmul, tuple(node.args[1:]))

    rewrite_nodes(gm, build)


def global_pool_as_mean(gm) -> None:
    """nn.AdaptiveAvgPool1d/2d/3d and F.adaptive_avg_pool*d to size 1 (a global average pool, the
    end of every ResNet) -> torch.mean over the pooled dims, keepdim: the same values, and the
    dim-reduction kernel takes it."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    fns = {F.adaptive_avg_pool1d: 1, F.adaptive_avg_pool2d: 2, F.adaptive_avg_pool3d: 3}
    mods = {nn.AdaptiveAvgPool1d: 1, nn.AdaptiveAvgPool2d: 2, nn.AdaptiveAvgPool3d: 3}
    def build(g, node):
        if node.op == "call_module" and type(gm.get_submodule(node.target)) in mods and len(node.args) == 1 \
                and not node.kwargs:
            nd, size = mods[type(gm.get_submodule(node.target))], gm.get_submodule(node.target).output_size
        elif node.op == "call_function" and node.target in fns and len(node.args) == 2 and not node.kwargs:
            nd, size = fns[node.target], node.args[1]
        else:
            return None
        if not all(v == 1 for v in (size if isinstance(size, (tuple, list)) else (size,))):
            return None
        return g.call_function(torch.mean, (node.args[0], tuple(range(-nd, 0))), {"keepdim": True})

    rewrite_nodes(gm, build)


def split_linear_bias(gm) -> None:
    """nn.Linear(x) -> F.linear(x, weight) + bias: the same values, and the bias add becomes an
    elementwise op that fuses with the epilogue after it (bias + ReLU + ... in one kernel)."""
    import torch.nn as nn
    import torch.nn.functional as F

    def build(g, node):
        if node.op != "call_module" or node.kwargs or len(node.args) != 1:
            return None
        mod = gm.get_submodule(node.target)
        if type(mod) is not nn.Linear:
            return None
        mm = g.call_function(F.linear, (node.args[0], g.get_attr(f"{node.target}.weight")))
        return mm if mod.bias is None else g.call_function(operator.add, (mm, g.get_attr(f"{node.target}.bias")))

    rewrite_nodes(gm, build)


def decompose_losses(gm) -> None:
    """F.smooth_l1_loss / mse_loss / l1_loss reduced by 'mean' or 'sum' -> the per-element loss,
    then torch.mean / torch.sum of it. torch reduces the same per-element loss, so the values are
    the same; the per-element half becomes elementwise ops (one fused kernel: mse is (p - t) ** 2,
    l1 |p - t|, smooth_l1 its own op) and the reduction the reduce starter's."""
    import torch
    import torch.nn.functional as F

    def build(g, node):
        if node.op != "call_function" or node.target not in (F.smooth_l1_loss, F.mse_loss, F.l1_loss):
            return None
        names = ("input", "target", "size_average", "reduce", "reduction")
        names += ("beta",) if node.target is F.smooth_l1_loss else ("weight",)
        a = dict(zip(names, node.args), **node.kwargs)
        # size_average / reduce are the legacy spelling of reduction, a weight scales each element:
        # left to torch
        if set(a) - set(names) or "input" not in a or "target" not in a or a.get("size_average") is not None \
                or a.get("reduce") is not None or a.get("weight") is not None \
                or a.get("reduction", "mean") not in ("mean", "sum"):
            return None
        p, t = a["input"], a["target"]
        if node.target is F.smooth_l1_loss:
            per = g.call_function(F.smooth_l1_loss, (p, t), {"reduction": "none", "beta": a.get("beta", 1.0)})
        else:
            d = g.call_function(operator.sub, (p, t))
            per = g.call_function(operator.pow, (d, 2)) if node.target is F.mse_loss \
                else g.call_function(torch.abs, (d,))
        return _reduced(g, per, a.get("reduction", "mean"))

    rewrite_nodes(gm, build)


def decompose_norms(gm) -> None:
    """torch.norm / Tensor.norm, the 2-norm of a vector or the Frobenius norm -> sqrt(sum(x * x,
    dim, keepdim)): the same values; the sum is the reduce starter's (the square fused into it
    over all of x), and x / norm over one dim becomes the L2 normalisation of kernels/rmsnorm/kb_rules.py.
    Other orders, dtype= and out= stay torch's."""
    import torch

    fn_names = ("input", "p", "dim", "keepdim", "out", "dtype")
    def build(g, node):
        if node.op == "call_function" and node.target in (torch.norm, torch.functional.norm):
            a = dict(zip(fn_names, node.args), **node.kwargs)
        elif node.op == "call_method" and node.target == "norm":
            a = dict(zip(("input", "p", "dim", "keepdim", "dtype"), node.args), **node.kwargs)
        else:
            return None
        p, dim, keepdim = a.get("p", "fro"), a.get("dim"), a.get("keepdim", False)
        if set(a) - set(fn_names) or "input" not in a or a.get("out") is not None or a.get("dtype") is not None \
                or not isinstance(keepdim, bool) or (dim is None and keepdim):
            return None
        # p = 2 over two dims is torch.norm's matrix (spectral) norm; Frobenius is the same sum for any dims
        if not (p == "fro" or (p in (2, 2.0, None) and (dim is None or isinstance(dim, int)))):
            return None
        return _norm2(g, a["input"], dim, keepdim)

    rewrite_nodes(gm, build)


def decompose_distance_losses(gm) -> None:
    """F.kl_div, F.cosine_similarity and the triplet margin loss (function or nn module) -> the
    elementwise ops and sums torch computes them with, so the elementwise kernel and the reduce
    starter take them (KernelBench L1 97-99):
    - kl_div(input, target) = xlogy(target, target) - target * input per element (exp(target) *
      (target - input) with log_target), then the reduction ('batchmean': the sum over the batch);
    - cosine_similarity(a, b, dim, eps) = sum(a / max(|a|, eps) * (b / max(|b|, eps)), dim), the
      norms taken along dim, as ATen does;
    - triplet_margin_loss (p = 2, no swap) = max(d(a, p) - d(a, n) + margin, 0) reduced, with
      d(x, y) = |x - y + eps| along the last dim (pairwise_distance)."""
    import torch
    import torch.nn.functional as F

    def build(g, node):
        if node.op == "call_function" and node.target is F.kl_div:
            a = dict(zip(("input", "target", "size_average", "reduce", "reduction", "log_target"), node.args),
                     **node.kwargs)
            red = a.get("reduction", "mean")
            if a.get("size_average") is not None or a.get("reduce") is not None \
                    or red not in ("mean", "sum", "batchmean", "none") \
                    or not isinstance(a.get("log_target", False), bool):
                return None
            x, t = a["input"], a["target"]
            if a.get("log_target", False):
                per = g.call_function(operator.mul, (g.call_function(torch.exp, (t,)),
                                                     g.call_function(operator.sub, (t, x))))
            else:
                per = g.call_function(operator.sub, (g.call_function(torch.xlogy, (t, t)),
                                                     g.call_function(operator.mul, (t, x))))
            out = per if red == "none" else _reduced(g, per, red, x)
        elif node.op == "call_function" and node.target is F.cosine_similarity:
            a = dict(zip(("x1", "x2", "dim", "eps"), node.args), **node.kwargs)
            dim, eps = a.get("dim", 1), a.get("eps", 1e-8)
            if set(a) - {"x1", "x2", "dim", "eps"} or not isinstance(dim, int) or not isinstance(eps, (int, float)):
                return None
            unit = []
            for v in (a["x1"], a["x2"]):
                n = g.call_function(torch.clamp, (_norm2(g, v, dim, keepdim=True),), {"min": float(eps)})
                unit.append(g.call_function(operator.truediv, (v, n)))
            out = g.call_function(torch.sum, (g.call_function(operator.mul, tuple(unit)), dim))
        elif _is_triplet(gm, node):
            mod = gm.get_submodule(node.target) if node.op == "call_module" else None
            names = ("anchor", "positive", "negative", "margin", "p", "eps", "swap", "size_average", "reduce",
                     "reduction")
            a = dict(zip(names, node.args), **node.kwargs)
            if mod is not None:
                a.update(margin=mod.margin, p=mod.p, eps=mod.eps, swap=mod.swap, reduction=mod.reduction)
            red = a.get("reduction", "mean")
            if a.get("p", 2) not in (2, 2.0) or a.get("swap") or a.get("size_average") is not None \
                    or a.get("reduce") is not None or red not in ("mean", "sum", "none") \
                    or not all(isinstance(a.get(k, 1.0), (int, float)) for k in ("margin", "eps")):
                return None
            eps, margin = float(a.get("eps", 1e-6)), float(a.get("margin", 1.0))
            diffs = [g.call_function(operator.sub, (a["anchor"], a[k])) for k in ("positive", "negative")]
            d = [_norm2(g, g.call_function(operator.add, (diff, eps)), -1) for diff in diffs]
            gap = g.call_function(operator.add, (g.call_function(operator.sub, tuple(d)), margin))
            per = g.call_function(torch.clamp, (gap,), {"min": 0.0})
            out = per if red == "none" else _reduced(g, per, red)
        else:
            return None
        return out

    rewrite_nodes(gm, build)


def _is_triplet(gm, node) -> bool:
    import torch.nn as nn
    import torch.nn.functional as F

    if node.op == "call_function":
        return node.target is F.triplet_margin_loss
    return node.op == "call_module" and type(gm.get_submodule(node.target)) is nn.TripletMarginLoss
