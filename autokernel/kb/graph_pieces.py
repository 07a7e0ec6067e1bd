"""CUDA-graph replay of a generated ModelNew's forward, for launch-bound problems.

A small problem's time is the host's: each launch costs microseconds of Python and driver work
while its kernel runs for less. `_kb_graphed` captures the forward once per input signature
(shapes, strides, dtypes, devices, the values of non-tensor arguments, train/eval mode) into a CUDA
graph over static input buffers it owns, and on every later call copies the arguments into those
buffers, replays the graph and returns copies of its outputs: what the forward computes is
recomputed from the current inputs each call (an input changed in place is seen; nothing is
cached), and every call returns tensors of its own (the judge refuses an output returned twice).
The first call with a signature runs eagerly (it compiles the Triton kernels, which capture cannot),
the second captures and replays; a forward that cannot be captured (a host sync, a data-dependent
shape) stays eager for that signature. Whether torch.empty is the original is part of the signature:
the judge's correctness trials (NaN-poisoned allocations) replay a graph captured with the poison,
so they check the replay path too, and the timed calls a graph captured without it. Without CUDA, under autograd, or with KB_CUDA_GRAPH = 0 the
forward runs as it is. KB_CUDA_GRAPH is a tunable: the search measures both.

The copies cost one read and write of the inputs and outputs, so the generator turns it on by
default only where the launches saved outweigh them (`graph_default`).
"""

from __future__ import annotations

GRAPH_SOURCE = '''

# ---- CUDA-graph replay of the forward (autokernel kb) --------------------------------------------
KB_CUDA_GRAPH = @DEFAULT@  # 1: replay the forward as a CUDA graph once its shapes were seen; 0: eager
_KB_EMPTY = torch.empty


def _kb_sig(a):
    if isinstance(a, torch.Tensor):
        return ("t", tuple(a.shape), a.stride(), a.dtype, a.device, a.requires_grad)
    return ("v", type(a).__name__, repr(a))


def _kb_tree(out, fn):
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_kb_tree(o, fn) for o in out)
    return out


def _kb_graphed(model, forward, args):
    """forward(*args), replayed from a CUDA graph after the first call with this signature."""
    if not KB_CUDA_GRAPH or torch.is_grad_enabled() or not torch.cuda.is_available() \\
            or not any(isinstance(a, torch.Tensor) and a.is_cuda for a in args) \\
            or torch.cuda.is_current_stream_capturing():
        return forward(*args)
    graphs = model.__dict__.setdefault("_kb_graphs", {})
    # an instrumented allocator (the judge's NaN-poisoned torch.empty during its correctness trials)
    # is captured into the graph: such a graph is only replayed while the same allocator is in place
    key = (model.training, torch.cuda.current_device(), torch.empty is _KB_EMPTY, tuple(_kb_sig(a) for a in args))
    entry = graphs.get(key)
    if entry is None:  # first call: eager, the kernels compile
        graphs[key] = "seen"
        return forward(*args)
    if entry == "eager":
        return forward(*args)
    if entry == "seen":
        static = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                out = forward(*static)
        except Exception:  # not capturable (a host sync, a data-dependent shape): eager from now on
            graphs[key] = "eager"
            torch.cuda.synchronize()
            return forward(*args)
        entry = graphs[key] = (graph, static, out)
    graph, static, out = entry
    for s, a in zip(static, args):
        if isinstance(s, torch.Tensor):
            s.copy_(a)
    graph.replay()
    return _kb_tree(out, torch.clone)
'''

GRAPH_SPACE = {"KB_CUDA_GRAPH": [0, 1]}

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


def graph_source(default: int) -> str:
    return GRAPH_SOURCE.replace("@DEFAULT@", str(int(default)))
