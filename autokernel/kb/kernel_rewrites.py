"""Rewrites of a traced graph into calls that one generated kernel family computes whole: nn.GRU /
nn.LSTM -> rnn_forward (templates/rnn.py, KernelBench L3 35-42: otherwise the whole problem stays
cuDNN's) and torch.triu / tril of the matmul of two triangular matrices -> tri_matmul
(templates/trimm.py). Each call is the reference itself (shapes propagate through it); the
emitter writes it as `_kb_rnn` / `_kb_trimm`.
"""

from __future__ import annotations


def rnn_forward(x, hx, module, lstm: bool):
    """The module's own forward (the reference); on the meta device only its output shapes (the
    meta GRU walks every step in Python: seconds at KernelBench's sizes)."""
    import torch

    if not x.is_meta:
        return module(x, hx)
    D = 2 if module.bidirectional else 1
    T, B = (x.shape[1], x.shape[0]) if module.batch_first and x.dim() == 3 else (x.shape[0], x.shape[1:2])
    B = tuple(B) if isinstance(B, torch.Size) else (B,)
    out_shape = ((B[0], T) if module.batch_first and x.dim() == 3 else (T, *B)) + (D * module.hidden_size,)
    out = torch.empty(out_shape, device="meta", dtype=x.dtype)
    h = torch.empty((module.num_layers * D, *B, module.hidden_size), device="meta", dtype=x.dtype)
    return (out, (h, torch.empty_like(h))) if lstm else (out, h)


def rnn_launches(gm, node) -> int:
    """Kernel launches of one rnn_forward node: per layer, the input projection and a step kernel per
    time step (both directions in one launch)."""
    from autokernel.kb.fx_nodes import node_shape

    x, mod = node.args[0], gm.get_submodule(node.args[2].target)
    shape = node_shape(x) or (1,)
    steps = shape[1] if mod.batch_first and len(shape) == 3 else shape[0]
    return (steps + 1) * mod.num_layers


def rewrite_rnns(gm) -> bool:
    """nn.GRU / nn.LSTM calls with fp32 weights (no dropout between layers, no projection) ->
    rnn_forward(x, hx, module, lstm). True when anything changed."""
    import torch
    import torch.nn as nn

    from autokernel.kb.fx_nodes import rewrite_nodes

    def build(g, node):
        if node.op != "call_module" or node.kwargs or not 1 <= len(node.args) <= 2:
            return None
        mod = gm.get_submodule(node.target)
        if type(mod) not in (nn.GRU, nn.LSTM) or (mod.dropout and mod.num_layers > 1) \
                or getattr(mod, "proj_size", 0):
            return None
        # fp32 weights: x is fp32 too (torch's RNNs refuse other inputs); run before shape propagation
        if any(p.dtype != torch.float32 for p in mod.parameters()):
            return None
        hx = node.args[1] if len(node.args) > 1 else None
        return g.call_function(rnn_forward, (node.args[0], hx, g.get_attr(node.target), type(mod) is nn.LSTM))

    return rewrite_nodes(gm, build)


def tri_matmul(a, b, upper: bool):
    """The reference: torch.triu(a @ b) (tril without `upper`)."""
    import torch

    c = torch.matmul(a, b)
    return torch.triu(c) if upper else torch.tril(c)


def rewrite_triangular(gm) -> bool:
    """torch.triu / tril (diagonal 0) of the matmul of two square fp32 matrices -> tri_matmul."""
    import torch

    from autokernel.kb.fx_nodes import fn_name, node_shape, rewrite_nodes

    def build(g, node):
        if node.op != "call_function" or node.target not in (torch.triu, torch.tril) or len(node.args) != 1 \
                or node.kwargs:
            return None
        mm = node.args[0]
        if getattr(mm, "op", None) != "call_function" or fn_name(mm.target) not in ("matmul", "mm") \
                or len(mm.args) != 2 or mm.kwargs or len(mm.users) != 1:
            return None
        a, b = mm.args
        sa, sb = node_shape(a), node_shape(b)
        if sa is None or len(sa) != 2 or sa[0] != sa[1] or sa != sb \
                or any(t.meta["tensor_meta"].dtype != torch.float32 for t in (a, b)):
            return None
        return g.call_function(tri_matmul, (a, b, node.target is torch.triu))

    changed = rewrite_nodes(gm, build)
    if changed:  # the matmuls the rewrite folded in
        for node in reversed(list(gm.graph.nodes)):
            if node.op == "call_function" and fn_name(node.target) in ("matmul", "mm") and not node.users:
                gm.graph.erase_node(node)
        gm.recompile()
    return changed
