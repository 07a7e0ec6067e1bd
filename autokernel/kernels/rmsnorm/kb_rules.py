"""How the KB compiler maps a traced problem to the rmsnorm starter (kb_helper.py): the RMS
normalisation written out op by op in a problem's forward (KernelBench L1 36:
x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + eps)), and the L2 one (x over the square
root of the sum of squares: L1 39's x / torch.norm(x, dim=1, keepdim=True) after rewrites.py),
found as one pattern so the rmsnorm starter computes it with one read and one write of x. Op by
op it is five passes over x (square, mean, add, sqrt, divide), two of them writing a tensor of
x's size.
"""

from __future__ import annotations

from autokernel.kb.fx_nodes import dim_ok, is_float_tensor, is_number, node_name, node_ndim
from autokernel.kb.rule_base import LibraryRule


def _call(node):
    """(name, args, kwargs) of a call_function / call_method node, else None."""
    from torch import fx

    name = node_name(node) if isinstance(node, fx.Node) else None
    return (name, list(node.args), dict(node.kwargs)) if name else None


def _only_use(node, user) -> bool:
    return len(node.users) == 1 and user in node.users


def _square_of(node):
    """x for x ** 2, torch.pow(x, 2), x.pow(2), x * x, torch.square(x); else None."""
    c = _call(node)
    if c is None or c[2]:
        return None
    name, args, _ = c
    if name == "pow" and len(args) == 2 and args[1] in (2, 2.0) and not isinstance(args[1], bool):
        return args[0]
    if name == "mul" and len(args) == 2 and args[0] is args[1]:
        return args[0]
    if name == "square" and len(args) == 1:
        return args[0]
    return None


def _mean_square(node):
    """(x, dim, mean) for mean(square(x), dim, keepdim=True) (mean True) or the sum (False) over
    one int dim; else None."""
    c = _call(node)
    if c is None or c[0] not in ("mean", "sum") or not c[1]:
        return None
    _, args, kw = c
    allk = dict(zip(("dim", "keepdim"), args[1:]), **kw)
    dim = allk.get("dim")
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    if set(allk) != {"dim", "keepdim"} or allk["keepdim"] is not True or not dim_ok(dim, node_ndim(args[0]) or 0):
        return None
    x = _square_of(args[0])
    if x is None or not _only_use(args[0], node):
        return None
    return x, dim, c[0] == "mean"


def _plus_eps(node):
    """(mean node, eps) for mean + eps or eps + mean, eps a number; else None."""
    c = _call(node)
    if c is None or c[0] != "add" or c[2] or len(c[1]) != 2:
        return None
    a, b = c[1]
    mean, eps = (a, b) if is_number(b) else (b, a)
    return (mean, float(eps)) if is_number(eps) and _only_use(mean, node) else None


def rms_of(node) -> dict | None:
    """For the node that finishes an RMS normalisation (x / sqrt(m + eps) or x * rsqrt(m + eps),
    m the mean of x's squares over one dim, keepdim) or an L2 one (m their sum, eps 0 or added):
    {"x", "dim", "eps", "mean", "folded"}, "folded" the nodes before it that the one call computes
    too. None for anything else."""
    c = _call(node)
    if c is None or c[2] or len(c[1]) != 2:
        return None
    name, (a, b), _ = c
    if name in ("truediv", "div"):
        x, root, want = a, b, "sqrt"
    elif name == "mul":
        (x, root), want = ((a, b) if (_call(b) or ("",))[0] == "rsqrt" else (b, a)), "rsqrt"
    else:
        return None
    r = _call(root)
    if r is None or r[0] != want or r[2] or len(r[1]) != 1 or not _only_use(root, node):
        return None
    added = r[1][0]
    pe = _plus_eps(added)
    if pe is not None and _only_use(added, root):
        mean, eps, folded = pe[0], pe[1], [added, root]
    else:  # no eps: x / sqrt(sum(x ** 2)), the L2 norm written out (or rewritten from torch.norm)
        mean, eps, folded = added, 0.0, [root]
    ms = _mean_square(mean)
    if ms is None or ms[0] is not x or not is_float_tensor(x) or not _only_use(mean, folded[0]):
        return None
    return {"x": x, "dim": ms[1] % node_ndim(x), "eps": eps, "mean": ms[2], "folded": [mean.args[0], mean] + folded}


class RmsNormRule(LibraryRule):
    def finds(self, gm, node) -> str | None:
        return self.kernel_type if rms_of(node) else None

    def pattern_call(self, rules, node) -> str | None:
        """_kb_rms_norm for the node finishing an RMS normalisation, '' for one folded into it."""
        plan = rules.fold_plan("rms", rms_of)
        if node not in plan:
            return None
        r = plan[node]
        if r is None:
            return ""
        return f"_kb_rms_norm({rules.fmt(r['x'])}, {r['dim']}, {r['eps']!r}{'' if r['mean'] else ', mean=False'})"


RULE = RmsNormRule("rmsnorm")
