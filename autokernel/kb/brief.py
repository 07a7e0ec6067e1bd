"""What a kernel engineer would want to know about a KernelBench problem before writing ModelNew:
its inputs, its ops in order with the shape each produces, and the bytes that any solution must
at least move. Traced on the meta device (trace.trace_problem), so nothing runs and no GPU is needed;
a model that fx cannot trace still gets its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from autokernel.kb.problems import Problem

MAX_OPS = 40  # a level-3 network lists its first ops and says how many more


@dataclass
class ProblemBrief:
    inputs: list[str] = field(default_factory=list)  # "float32[16, 3, 256, 256]"
    ops: list[str] = field(default_factory=list)  # "conv2d -> float32[16, 64, 254, 254]"
    outputs: list[str] = field(default_factory=list)
    input_bytes: int = 0
    param_bytes: int = 0
    output_bytes: int = 0
    note: Optional[str] = None  # why the ops are missing

    @property
    def floor_bytes(self) -> int:
        """Inputs and parameters read once, outputs written once."""
        return self.input_bytes + self.param_bytes + self.output_bytes

    def to_markdown(self) -> str:
        lines = ["## The problem's shapes",
                 "Inputs (get_inputs): " + (", ".join(self.inputs) or "unknown")]
        if self.outputs:
            lines.append("Outputs: " + ", ".join(self.outputs))
        if self.ops:
            lines.append("Ops in order (what PyTorch launches one after another; fuse across them):")
            lines += [f"{i}. {op}" for i, op in enumerate(self.ops, 1)]
        elif self.note:
            lines.append(f"Ops: not traced ({self.note})")
        if self.floor_bytes:
            params = f" + {_mb(self.param_bytes)} of parameters" if self.param_bytes else ""
            lines.append(f"Minimum traffic: {_mb(self.input_bytes)} of inputs{params} read once + "
                         f"{_mb(self.output_bytes)} of outputs written once = {_mb(self.floor_bytes)}")
        return "\n".join(lines)


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} KB"


def _describe(t) -> str:
    return f"{str(t.dtype).replace('torch.', '')}[{', '.join(str(d) for d in t.shape)}]"


def _nbytes(tm) -> int:
    import math

    return math.prod(tm.shape) * tm.dtype.itemsize


def _op_name(gm, node) -> str:
    if node.op == "call_module":
        return type(gm.get_submodule(node.target)).__name__
    if node.op == "call_method":
        return f".{node.target}"
    if node.target is getattr and len(node.args) > 1:  # x.T, x.mT: an attribute, not a call
        return f".{node.args[1]}"
    return getattr(node.target, "__name__", str(node.target))


def problem_brief(problem: Problem) -> ProblemBrief:
    """The brief of one problem; never raises (a problem that cannot be read gives what could be)."""
    import torch

    from autokernel.kb.trace import meta_mode, trace_problem

    brief = ProblemBrief()
    try:
        gm = trace_problem(problem)
    except Exception as exc:  # fx cannot trace data-dependent control flow, HF models, ...
        brief.note = f"{type(exc).__name__}"
        try:
            mod = problem.load_module()
            with torch.device("meta"), meta_mode():
                inputs = [a for a in mod.get_inputs() if isinstance(a, torch.Tensor)]
            brief.inputs = [_describe(t) for t in inputs]
            brief.input_bytes = sum(t.numel() * t.dtype.itemsize for t in inputs)
        except Exception as inner:  # the problem file itself is broken: the judge will say so
            brief.note += f"; inputs unknown: {type(inner).__name__}"
        return brief
    for node in gm.graph.nodes:
        tm = node.meta.get("tensor_meta")
        if node.op == "placeholder" and hasattr(tm, "shape"):
            brief.inputs.append(_describe(tm))
            brief.input_bytes += _nbytes(tm)
        elif node.op in ("call_function", "call_module", "call_method"):
            shape = f" -> {_describe(tm)}" if hasattr(tm, "shape") else ""
            brief.ops.append(f"{_op_name(gm, node)}{shape}")
        elif node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
            for o in outs:
                otm = getattr(o, "meta", {}).get("tensor_meta")
                if hasattr(otm, "shape"):
                    brief.outputs.append(_describe(otm))
                    brief.output_bytes += _nbytes(otm)
    brief.param_bytes = sum(p.numel() * p.dtype.itemsize for p in gm.parameters())
    brief.param_bytes += sum(b.numel() * b.dtype.itemsize for b in gm.buffers())
    if len(brief.ops) > MAX_OPS:
        brief.ops = brief.ops[:MAX_OPS] + [f"... and {len(brief.ops) - MAX_OPS} more"]
    return brief
