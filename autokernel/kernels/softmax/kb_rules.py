"""How the KB compiler maps a traced problem's softmax to the softmax starter (kb_helper.py):
nn.Softmax / nn.LogSoftmax, F.softmax / log_softmax and the tensor methods, over one int dim."""

from __future__ import annotations

from torch import nn

from autokernel.kb.fx_nodes import dim_ok, is_float_tensor, needs_layout, node_ndim
from autokernel.kb.rule_base import LibraryRule


class SoftmaxRule(LibraryRule):
    def softmax_call(self, rules, node, x, dim, log: bool = False) -> str | None:
        """_kb_softmax (log_softmax with `log`) over one int dim (dim=None, torch's implicit legacy
        choice, stays a torch op)."""
        nd = node_ndim(x) or 0
        if not is_float_tensor(x) or not dim_ok(dim, nd):
            return None
        dim %= nd
        if dim == nd - 1:
            return f"_kb_softmax({rules.fmt(x)}, {dim}{', log=True' if log else ''})"
        # a non-last dim comes back as a permuted view: copied to x's layout only where that matters
        return f"_kb_softmax({rules.fmt(x)}, {dim}, contiguous={needs_layout(node)}{', log=True' if log else ''})"

    def module_call(self, rules, node, mod, x) -> str | None:
        if not isinstance(mod, (nn.Softmax, nn.LogSoftmax)):
            return None
        return self.softmax_call(rules, node, x, mod.dim, log=isinstance(mod, nn.LogSoftmax))

    def function_call(self, rules, node, name, x, rest, kw) -> str | None:
        # F.softmax traces with its _stacklevel and dtype=None as keywords; a dtype other than
        # x's own is a cast first, which the starter does not do
        allk = dict(zip(("dim", "dtype"), rest), **kw)
        if set(allk) <= {"dim", "dtype", "_stacklevel"} and allk.get("dtype") in (None, x.meta["tensor_meta"].dtype):
            return self.softmax_call(rules, node, x, allk.get("dim"), log=name == "log_softmax")
        return None


RULE = SoftmaxRule("softmax", ("softmax", "log_softmax"), ("Softmax", "LogSoftmax"))
