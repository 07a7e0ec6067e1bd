"""How the KB compiler maps a traced problem's layer norm to the layernorm starter (kb_helper.py):
nn.LayerNorm and F.layer_norm with weight and bias, over one or more trailing dims."""

from __future__ import annotations

from torch import nn

from autokernel.kb.rule_base import LibraryRule


class LayerNormRule(LibraryRule):
    def module_call(self, rules, node, mod, x) -> str | None:
        if not isinstance(mod, nn.LayerNorm) or not mod.elementwise_affine or mod.bias is None:
            return None
        ref = f"self.get_submodule({node.target!r})"
        return f"_kb_layer_norm({rules.fmt(x)}, {ref}.weight, {ref}.bias, {ref}.eps)"

    def function_call(self, rules, node, name, x, rest, kw) -> str | None:
        allk = dict(zip(("normalized_shape", "weight", "bias", "eps"), rest), **kw)
        ns = allk.get("normalized_shape")
        if allk.get("weight") is None or allk.get("bias") is None or not isinstance(ns, (list, tuple)) or not ns:
            return None
        return (f"_kb_layer_norm({rules.fmt(x)}, {rules.fmt(allk['weight'])}, {rules.fmt(allk['bias'])}, "
                f"{rules.fmt(allk.get('eps', 1e-5))})")


RULE = LayerNormRule("layernorm", ("layer_norm",), ("LayerNorm",))
