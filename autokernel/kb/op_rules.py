"""Which traced op becomes which kernel call: the rules that map a torch.fx node (a module call,
a function or a method) to the expression that replaces it in ModelNew's forward. Split by what
they match: the library starters' ops in each kernel type's folder (its kb_rules.py, RULE: a
rule_base.LibraryRule, found through the registry; main_op picks the type whose starter a problem
gets), elementwise ops in elementwise.py, the generated kernel families' ops in pattern_rules.py;
OpRules.replacement asks them in turn. A rule returns None when the call has arguments it does not
cover; the op then stays a torch op.
"""

from __future__ import annotations

from autokernel.kb.elementwise import ElementwiseRules
from autokernel.kb.fx_nodes import fn_name, is_float_tensor
from autokernel.kb.pattern_rules import DIMRED_OPS, PatternRules
from autokernel.kb.rule_base import LibraryRule


def library_rules() -> dict[str, LibraryRule]:
    """Every registered kernel type's KB rule, in registry order (types without one left out)."""
    from autokernel.kernels import registry

    return {t: rule for t in registry.kernel_types() if (rule := registry.kb_rule(t)) is not None}


def main_op(gm) -> str | None:
    """The kernel type whose starter gets the problem's main op (the lowest rank among those the
    graph's nodes are), or None."""
    rules = library_rules()
    found = [t for node in gm.graph.nodes for t in (rule.finds(gm, node) for rule in rules.values()) if t]
    found.sort(key=lambda t: rules[t].rank)
    return found[0] if found else None


class OpRules(PatternRules, ElementwiseRules):
    """All the rules, as a mixin of the emitter (the state they share: rule_base.Rules); the
    elementwise and generated kernels' inherited, the main type's asked through its LibraryRule."""

    def replacement(self, node) -> str | None:
        from autokernel.kernels import registry

        args, kw = list(node.args), dict(node.kwargs)
        taken = self.generated_call(node)
        if taken is not None:
            return taken
        lib = registry.kb_rule(self.main) if self.main else None
        if lib is not None:
            taken = lib.pattern_call(self, node)
            if taken is not None:
                return taken
        if node.op == "call_module":
            mod = self.gm.get_submodule(node.target)
            taken = lib.module_call(self, node, mod, args[0]) if lib is not None else None
            return taken if taken is not None else self.ew_module(mod, args[0])
        if node.op == "call_method":
            name = node.target
            if not args:
                return None
            x = args[0]
            rest, kw2 = args[1:], kw
        elif node.op == "call_function":
            name = fn_name(node.target)
            if name is None:
                return None
            x = args[0] if args else kw.get("input")
            rest, kw2 = args[1:], {k: v for k, v in kw.items() if k != "input"}
        else:
            return None
        if name in ("cumsum", "cumprod", "flip", "mul"):
            scan = self.scan_call(node)
            if scan is not None:
                return scan
        if name in DIMRED_OPS:
            return self.dimred_call(node, name, x, rest, kw2)
        ew = self.ew_function(node, name, x, rest, kw2)
        if ew is not None:
            return ew
        if lib is not None and name in lib.calls and is_float_tensor(x):
            return lib.function_call(self, node, name, x, rest, kw2)
        if name in ("sum", "mean") and (rest or "dim" in kw2):  # next to another starter: the dim-reduction kernel
            return self.dimred_call(node, name, x, rest, kw2)
        return None
