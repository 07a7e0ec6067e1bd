"""How the KB compiler maps a traced problem's sum or mean to the reduce starter (kb_helper.py):
over one dim, a run of adjacent dims or all of x (a loss, which a fused elementwise kernel may
finish instead)."""

from __future__ import annotations

from autokernel.kb.fx_nodes import dim_ok, node_ndim
from autokernel.kb.rule_base import LibraryRule


class ReduceRule(LibraryRule):
    def function_call(self, rules, node, name, x, rest, kw) -> str | None:
        """_kb_sum / _kb_mean over one dim, a run of adjacent dims, or all of x (dim None)."""
        allk = dict(zip(("dim", "keepdim"), rest), **kw)
        dim, keepdim = allk.get("dim"), allk.get("keepdim", False)
        nd = max(node_ndim(x) or 0, 1)  # a 0-dim tensor takes dim 0 and -1
        if set(allk) - {"dim", "keepdim", "dtype"} or allk.get("dtype") not in (None, x.meta["tensor_meta"].dtype) \
                or not isinstance(keepdim, bool):
            return None
        if dim is not None:
            dims = [dim] if isinstance(dim, int) else list(dim) if isinstance(dim, (list, tuple)) else []
            if not dims or not all(dim_ok(d, nd) for d in dims):
                return None
            dims = sorted(d % nd for d in dims)
            if dims != list(range(dims[0], dims[-1] + 1)):  # not one [outer, R, inner] view of x
                return None
            dim = dims[0] if len(dims) == 1 else tuple(dims)
        elif not keepdim:
            rules.whole[node] = (x, name)
        return f"_kb_{name}({rules.fmt(x)}, {dim!r}, keepdim={keepdim})"


# rank 2: a sum or mean next to another library op is most often its small tail (a mean after a
# softmax, a row sum of its output): the other op gets the starter
RULE = ReduceRule("reduce", ("sum", "mean"), rank=2)
