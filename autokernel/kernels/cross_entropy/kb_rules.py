"""How the KB compiler maps a traced problem's F.cross_entropy (2-D logits, class-index targets,
torch's default weight, reduction and smoothing) to the cross_entropy starter (kb_helper.py)."""

from __future__ import annotations

from autokernel.kb.fx_nodes import node_ndim
from autokernel.kb.rule_base import LibraryRule

DEFAULTS = {"weight": None, "size_average": None, "ignore_index": -100, "reduce": None, "reduction": "mean",
            "label_smoothing": 0.0}


class CrossEntropyRule(LibraryRule):
    def function_call(self, rules, node, name, x, rest, kw) -> str | None:
        if len(rest) != 1 or node_ndim(x) != 2 or not all(DEFAULTS.get(k, object()) == v for k, v in kw.items()):
            return None
        return f"_kb_cross_entropy({rules.fmt(x)}, {rules.fmt(rest[0])})"


RULE = CrossEntropyRule("cross_entropy", ("cross_entropy",))
