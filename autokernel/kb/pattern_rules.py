"""The rules for the generated kernel families' ops and for patterns of several nodes: `_kb_scan`
(a scan with the flips and mask it folds in), `_kb_dimred`, `_kb_conv` / `_kb_pool` (their
arguments read by fallback_rules.py), and fold_plan, which finds patterns of several nodes once
per graph (a type's rule uses it too: kernels/rmsnorm/kb_rules.py). OpRules inherits them.
"""

from __future__ import annotations

from autokernel.kb.fx_nodes import dim_ok, is_float_tensor, needs_layout, node_name, node_ndim
from autokernel.kb.rule_base import Rules

# the reductions over a dim the dim-reduction kernel computes (besides sums and means next to another starter)
DIMRED_OPS = ("max", "min", "amax", "amin", "argmax", "argmin", "prod", "logsumexp")


def _flip_dim(node, nd: int) -> int | None:
    """The one dim a flip node flips (x.flip(1), torch.flip(x, [1])), else None."""
    if not hasattr(node, "op") or node_name(node) != "flip" or len(node.args) < 1 or node_ndim(node.args[0]) != nd:
        return None
    dims = list(node.args[1:]) if node.op == "call_method" else list(node.args[1:2])
    dims = dims or [node.kwargs.get("dims")]
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = list(dims[0])
    if set(node.kwargs) - {"dims"} or len(dims) != 1 or not dim_ok(dims[0], nd):
        return None
    return dims[0] % nd


def _mask_operands(node):
    """(x, mask) of x * mask with a bool mask of x's shape: the scan's prologue; else None."""
    import torch

    if node_name(node) != "mul" or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    for x, m in ((a, b), (b, a)):
        tm = getattr(m, "meta", {}).get("tensor_meta")
        if is_float_tensor(x) and getattr(tm, "dtype", None) == torch.bool \
                and tuple(tm.shape) == tuple(x.meta["tensor_meta"].shape) \
                and x.meta["tensor_meta"].dtype == node.meta["tensor_meta"].dtype:
            return x, m
    return None


def scan_of(node) -> dict | None:
    """A cumsum / cumprod node as one _kb_scan: its input, dim, and the nodes folded into the call
    (flips on both sides over the same dim: a reversed scan; a bool mask multiplied in: a
    prologue). Each folded node has the chain as its only user, so it needs no line of its own;
    "out" is the node whose line makes the call."""
    name = node_name(node)
    if name not in ("cumsum", "cumprod") or not (node.args or "input" in node.kwargs):
        return None
    x = node.args[0] if node.args else node.kwargs["input"]
    allk = dict(zip(("dim", "dtype"), node.args[1:]), **{k: v for k, v in node.kwargs.items() if k != "input"})
    nd, dim = node_ndim(x) or 0, allk.get("dim")
    # torch.cumsum of an int or bool tensor gives int64: left to torch, as is a cast (dtype=)
    if set(allk) - {"dim", "dtype"} or not is_float_tensor(x) \
            or allk.get("dtype") not in (None, x.meta["tensor_meta"].dtype) \
            or not dim_ok(dim, nd):
        return None
    dim %= nd
    s = {"x": x, "dim": dim, "prod": name == "cumprod", "reverse": False, "mask": None, "folded": [], "out": node}
    users = list(node.users)
    if _flip_dim(x, nd) == dim and len(x.users) == 1 and len(users) == 1 and _flip_dim(users[0], nd) == dim:
        s.update(reverse=True, folded=[x, node], out=users[0])
        x = s["x"] = x.args[0]
    mask = _mask_operands(x) if len(x.users) == 1 else None
    if mask:
        s["folded"].append(x)
        s["x"], s["mask"] = mask
    return s


class PatternRules(Rules):
    """The rules for the generated kernels' ops that span several nodes or need the fallback."""

    def fold_plan(self, key: str, find) -> dict:
        """node -> the pattern `find` found ending at it (a dict with "folded", the nodes before it
        that its one call computes too, and "out", the node making the call, itself by default),
        or None for a folded node; built once per graph. A node two patterns would claim (one
        scan's outer flip the next one's inner flip) stays with the first: the later pattern stays
        torch ops."""
        plans = self.fold_plans
        if key not in plans:
            plan = plans[key] = {}
            for n in self.gm.graph.nodes:
                p = find(n)
                out = p.get("out", n) if p else None
                if p and not any(f in plan for f in p["folded"] + [out]):
                    plan.update(dict.fromkeys(p["folded"]))
                    plan[out] = p
        return plans[key]

    def scan_call(self, node) -> str | None:
        """_kb_scan for the node making a scan's call, '' for a node folded into one (no line)."""
        plan = self.fold_plan("scan", scan_of)
        if node not in plan:
            return None
        self.generated["scan"].add(node)
        s = plan[node]
        if s is None:
            return ""
        extra = "".join(f", {k}=True" for k in ("prod", "reverse") if s[k])
        extra += f", mask={self.fmt(s['mask'])}" if s["mask"] is not None else ""
        if s["dim"] != node_ndim(s["x"]) - 1:  # a permuted view back, copied only where that matters
            extra += f", contiguous={needs_layout(s['out'])}"
        return f"_kb_scan({self.fmt(s['x'])}, {s['dim']}{extra})"

    def dimred_call(self, node, name: str, x, rest, kw) -> str | None:
        """_kb_dimred for max / min / amax / amin / argmax / argmin / prod / logsumexp over one int dim of a
        float tensor, sum / mean over one dim or a run of adjacent dims (torch.max(a, b), a full
        reduction, dtype= stay torch ops)."""
        allk = dict(zip(("dim", "keepdim"), rest), **kw)
        dim, keepdim = allk.get("dim"), allk.get("keepdim", False)
        nd = node_ndim(x) or 0
        if name in ("sum", "mean") and isinstance(dim, (list, tuple)) and dim and all(dim_ok(d, nd) for d in dim):
            dims = sorted(d % nd for d in dim)  # a run of adjacent dims: one dim of a reshaped view
            dim = tuple(dims) if dims == list(range(dims[0], dims[-1] + 1)) else None
            if dim is not None and len(dim) == 1:
                dim = dim[0]
        elif name in ("amax", "amin", "logsumexp", "sum", "mean") and isinstance(dim, (list, tuple)) and len(dim) == 1:
            dim = dim[0]
        ok = dim_ok(dim, nd) or isinstance(dim, tuple)
        if set(allk) - {"dim", "keepdim"} or not is_float_tensor(x) or not ok or not isinstance(keepdim, bool):
            return None
        self.generated["dimred"].add(node)
        return f"_kb_dimred({self.fmt(x)}, {dim if isinstance(dim, tuple) else dim % nd}, {name!r}, keepdim={keepdim})"

    def generated_call(self, node) -> str | None:
        """A call one generated kernel family computes whole: the statistics of a normalisation, a
        GRU / LSTM, a triangular matmul, a transposed convolution's spatial mean, an exclusive
        cumsum, a GEMM's sum over its features (their rewrites made the call), a convolution or pool."""
        from autokernel.kb.kernel_rewrites import (conv_mean, exclusive_cumsum, gemm_sum, rnn_forward, rnn_launches,
                                                   tri_matmul)
        from autokernel.kb.norm_rewrites import norm_stats

        if node.op == "call_function" and node.target is exclusive_cumsum:
            self.generated["scan"].add(node)
            x, dim = node.args
            extra = f", contiguous={needs_layout(node)}" if dim != node_ndim(x) - 1 else ""
            return f"_kb_scan({self.fmt(x)}, {dim}, exclusive=True{extra})"

        for family, target, fn in (("norm", norm_stats, "_kb_norm_stats"), ("rnn", rnn_forward, "_kb_rnn"),
                                   ("trimm", tri_matmul, "_kb_trimm"), ("convmean", conv_mean, "_kb_convmean"),
                                   ("gemmsum", gemm_sum, "_kb_gemmsum")):
            if node.op == "call_function" and node.target is target:
                self.generated[family].add(node)
                if family == "rnn":  # one launch per step, layer and direction (the graph default counts them)
                    self.launches += rnn_launches(self.gm, node) - 1
                elif family in ("convmean", "gemmsum"):  # a reduction kernel, then the product
                    self.launches += 1
                return f"{fn}({self.call(node.args, node.kwargs)})"
        return self.fallback_call(node)

    def fallback_call(self, node) -> str | None:
        """_kb_conv / _kb_pool for a convolution or pool, when the emitter takes them (fallback True:
        nothing else would run a kernel of ours; "pool": the pools alone, pools_dominate)."""
        if not self.fallback:
            return None
        from autokernel.kb.fallback_rules import conv_args, pool_args

        a = conv_args(self.gm, node) if self.fallback is True else None
        if a is not None:
            self.generated["conv"].add(node)
            hyper = "".join(f", {k}={self.fmt(a[k])}" for k in ("stride", "padding", "dilation", "groups", "transposed",
                                                               "output_padding") if k in a)
            return f"_kb_conv({self.fmt(a['x'])}, {self.fmt(a['weight'])}, {self.fmt(a['bias'])}{hyper})"
        a = pool_args(self.gm, node)
        if a is not None:
            self.generated["pool"].add(node)
            hyper = "".join(f", {k}={self.fmt(v)}" for k, v in a.items() if k not in ("x", "nd", "kind"))
            return f"_kb_pool({self.fmt(a['x'])}, {a['nd']}, {a['kind']!r}{hyper})"
        return None
