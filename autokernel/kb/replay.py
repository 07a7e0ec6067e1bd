"""When a generated forward is replayed as a CUDA graph (templates/graph.py): its launches, the
bytes a replay copies, and KB_CUDA_GRAPH's default from the two.
"""

from __future__ import annotations

# host time a launch costs past its kernel (s), and the copy bandwidth (B/s) of the H200
LAUNCH_S = 4e-6
COPY_BPS = 1.5e12


def graph_default(launches: int, copy_bytes: int) -> int:
    """1 when replaying `launches` launches as one graph saves more host time than copying
    `copy_bytes` (inputs in, outputs out) costs, else 0."""
    return int(launches >= 2 and copy_bytes * 2 / COPY_BPS < LAUNCH_S * (launches - 1))


_VIEWS = {"view", "view_as", "reshape", "transpose", "permute", "flatten", "unflatten", "unsqueeze", "squeeze",
          "expand", "expand_as", "size", "dim", "split", "chunk", "unbind", "t", "narrow", "select", "movedim", "to",
          "type_as", "numel"}


def launches_nothing(gm, node) -> bool:
    """A kept op that only makes a view or reads metadata (a guess: .to() may copy)."""
    import operator

    import torch.nn as nn

    if node.op == "call_method":
        return node.target in _VIEWS
    if node.op == "call_module":
        return type(gm.get_submodule(node.target)) in (nn.Dropout, nn.Identity, nn.Flatten)
    return node.target in (operator.getitem, getattr) or getattr(node.target, "__name__", "") in _VIEWS


def io_bytes(gm) -> int:
    """Bytes of the forward's tensor inputs and outputs (what a graph replay copies)."""

    def size(m) -> int:
        if hasattr(m, "shape") and hasattr(m, "dtype"):  # a TensorMetadata (itself a tuple)
            n = 1
            for d in m.shape:
                n *= int(d)
            return n * m.dtype.itemsize
        if isinstance(m, (tuple, list)):
            return sum(size(v) for v in m)
        return 0

    total = 0
    for node in gm.graph.nodes:
        vals = [node] if node.op == "placeholder" else list(node.all_input_nodes) if node.op == "output" else []
        total += sum(size(v.meta.get("tensor_meta")) for v in vals)
    return total
