"""How the KB compiler maps a traced problem's ops to the matmul starter (kb_helper.py): nn.Linear,
F.linear, matmul / mm / bmm of 2-D or same-batch operands, and an attention the flash starter does
not take (two bmm, kb_helper._kb_sdpa_mm); one it takes comes in as the flash starter, second."""

from __future__ import annotations

from torch import nn

from autokernel.kb.fx_nodes import is_float_tensor, node_ndim, node_shape
from autokernel.kb.rule_base import LibraryRule
from autokernel.kernels.flash_attention.kb_rules import RULE as FLASH


class MatmulRule(LibraryRule):
    def pattern_call(self, rules, node) -> str | None:
        return FLASH.attention_call(rules, node)

    def module_call(self, rules, node, mod, x) -> str | None:
        if not isinstance(mod, nn.Linear) or not is_float_tensor(x):
            return None
        ref = f"self.get_submodule({node.target!r})"
        return f"_kb_linear({rules.fmt(x)}, {ref}.weight, {ref}.bias)"

    def function_call(self, rules, node, name, x, rest, kw) -> str | None:
        if name == "linear":
            w = rest[0] if rest else kw.get("weight")
            b = rest[1] if len(rest) > 1 else kw.get("bias")
            return f"_kb_linear({rules.fmt(x)}, {rules.fmt(w)}, {rules.fmt(b)})"
        if len(rest) != 1 or kw:
            return None
        a, b = x, rest[0]
        batched = node_ndim(a) == node_ndim(b) >= 3 and node_shape(a)[:-2] == node_shape(b)[:-2]
        if is_float_tensor(b) and (node_ndim(b) == 2 or batched):
            return f"_kb_mm({rules.fmt(a)}, {rules.fmt(b)})"
        return None


# rank 0: a GEMM next to any other library op gets the starter (it is most of the time)
RULE = MatmulRule("matmul", ("matmul", "mm", "bmm", "linear"), ("Linear",), rank=0)
