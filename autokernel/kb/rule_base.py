"""What the rule mixins (ElementwiseRules, PatternRules, OpRules) share with the emitter that runs
them: the traced graph, the starter in use, and what the rules record for the emitter."""

from __future__ import annotations

from typing import Any


class Rules:
    """The state the rules read and write; the emitter (solutions.py) provides fmt and call."""

    gm: Any  # the traced torch.fx GraphModule
    main: str | None  # the library starter in use for the problem's main op, or None
    fallback: bool  # the generated convolution and pooling kernels take those ops
    # each node a generated kernel computes, by family ("scan", "dimred", "conv", "pool", "norm", "rnn", "trimm")
    generated: dict[str, set]
    whole: dict  # sums and means of all of a tensor: node -> (x, "sum" | "mean"), foldable into x's fused kernel
    last_ew: tuple | None  # (op, x, y, alpha, beta) of the last elementwise replacement, which fusion reads
    second: str | None  # a second starter the file needs (flash attention next to matmul)
    masked: bool  # an attention with a mask buffer is computed (_kb_masked_sdpa)
    launches: int  # kernel launches of one forward, about
    fold_plans: dict  # PatternRules' plans of the graph, by pattern, built once

    def __init__(self, gm, main: str | None, families, fallback: bool = False):
        self.gm, self.main, self.fallback = gm, main, fallback
        self.generated = {g: set() for g in families}
        self.whole, self.last_ew, self.second, self.masked, self.launches, self.fold_plans = {}, None, None, False, 0, {}

    def fmt(self, a) -> str:  # a constant or fx node as source text (the emitter's)
        raise NotImplementedError

    def call(self, args, kwargs) -> str:  # call arguments as source text (the emitter's)
        raise NotImplementedError
