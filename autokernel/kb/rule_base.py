"""What the rule mixins (ElementwiseRules, PatternRules, OpRules) share with the emitter that runs
them: the traced graph, the starter in use, and what the rules record for the emitter; and
LibraryRule, what a kernel type's folder tells the compiler about its op (its kb_rules.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autokernel.kb.fx_nodes import fn_name


class Rules:
    """The state the rules read and write; the emitter (solutions.py) provides fmt and call."""

    gm: Any  # the traced torch.fx GraphModule
    main: str | None  # the library starter in use for the problem's main op, or None
    fallback: bool | str  # True: the generated convolution and pooling kernels take those ops; "pool": pools only
    # each node a generated kernel computes, by family ("scan", "dimred", "conv", "pool", "norm", "rnn", "trimm",
    # "convmean", "gemmsum")
    generated: dict[str, set]
    whole: dict  # sums and means of all of a tensor: node -> (x, "sum" | "mean"), foldable into x's fused kernel
    last_ew: tuple | None  # (op, x, y, alpha, beta) of the last elementwise replacement, which fusion reads
    second: str | None  # a second starter the file needs (flash attention next to matmul)
    extras: dict  # more helper modules the file needs: (kernel type, module name) -> True, in order
    launches: int  # kernel launches of one forward, about
    fold_plans: dict  # PatternRules' plans of the graph, by pattern, built once

    def __init__(self, gm, main: str | None, families, fallback: bool | str = False):
        self.gm, self.main, self.fallback = gm, main, fallback
        self.generated = {g: set() for g in families}
        self.whole, self.last_ew, self.second, self.extras, self.launches, self.fold_plans = {}, None, None, {}, 0, {}

    def fmt(self, a) -> str:  # a constant or fx node as source text (the emitter's)
        raise NotImplementedError

    def call(self, args, kwargs) -> str:  # call arguments as source text (the emitter's)
        raise NotImplementedError


@dataclass(frozen=True)
class LibraryRule:
    """A kernel type whose library starter can take a problem's main op (RULE in the type's
    kb_rules.py; the registry finds it): the traced calls that are that op (function / method
    names, torch.nn module classes by name), and how the type's rule writes a call of its helpers
    (the folder's kb_helper.py, which adapts those calls to the starter's entry). Only the rule of
    the problem's main type (op_rules.main_op) is asked; `rules` is the emitter (Rules)."""

    kernel_type: str
    calls: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    rank: int = 1  # main_op's preference among the types a graph has: the lowest rank gets the starter

    def finds(self, gm, node) -> str | None:
        """The type whose starter would take `node` (this one, or another one this rule knows
        computes what the node does), else None."""
        if node.op == "call_module":
            takes = any(c.__name__ in self.modules and c.__module__.startswith("torch.nn")
                        for c in type(gm.get_submodule(node.target)).__mro__)
        else:
            name = fn_name(node.target) if node.op == "call_function" else node.target
            takes = node.op in ("call_function", "call_method") and name in self.calls
        return self.kernel_type if takes else None

    def pattern_call(self, rules: Rules, node) -> str | None:
        """The replacement of a node that ends a pattern of ops (asked before any other rule; ''
        for a node folded into a later one's call), else None."""
        return None

    def module_call(self, rules: Rules, node, mod, x) -> str | None:
        """The replacement of a call of module `mod` on `x`, else None."""
        return None

    def function_call(self, rules: Rules, node, name: str, x, rest: list, kw: dict) -> str | None:
        """The replacement of `name(x, *rest, **kw)`, name one of `calls` and x a floating tensor;
        None keeps the torch op."""
        return None
