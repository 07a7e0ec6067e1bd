"""Questions about torch.fx nodes that the KernelBench rules ask: is it a float tensor, how many dims,
a Python number or one known only at run time, which torch function a call is, whether a result's
layout matters downstream. Shared by the rules (op_rules.py, pattern_rules.py, fallback_rules.py
and the kernel types' kb_rules.py).
"""

from __future__ import annotations

import operator


def is_float_tensor(a) -> bool:
    from torch import fx

    if not isinstance(a, fx.Node):
        return False
    tm = a.meta.get("tensor_meta")
    return tm is not None and hasattr(tm, "dtype") and tm.dtype.is_floating_point


def node_shape(a) -> tuple | None:
    """The traced shape of a tensor node; None for anything else."""
    tm = getattr(a, "meta", {}).get("tensor_meta")
    return tuple(tm.shape) if tm is not None and hasattr(tm, "shape") else None


def node_ndim(a) -> int | None:
    shape = node_shape(a)
    return None if shape is None else len(shape)


def is_number(a) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def is_scalar_node(a) -> bool:
    """A Python number known only at run time (a float forward argument, x.shape[0] * 2): the
    elementwise kernel takes it as its alpha argument instead of a constant."""
    from torch import fx

    return isinstance(a, fx.Node) and a.meta.get("type") in (int, float)


def fn_name(target) -> str | None:
    """A short name for a call_function target: 'relu', 'add', 'matmul', ..."""
    import torch
    import torch.nn.functional as F

    if target in (operator.add, operator.sub, operator.mul, operator.truediv, operator.matmul, operator.neg,
                  operator.pow):
        return target.__name__
    for mod in (torch, F, torch.special):
        for name in ("relu", "gelu", "sigmoid", "tanh", "silu", "exp", "neg", "abs", "rsqrt", "sqrt", "log", "add",
                     "sub", "mul", "div", "matmul", "mm", "bmm", "softmax", "layer_norm", "sum", "cross_entropy",
                     "linear", "pow", "square", "leaky_relu", "hardtanh", "clamp", "relu6", "mish", "softplus",
                     "hardswish", "elu", "scaled_dot_product_attention", "mean", "smooth_l1_loss", "cumsum",
                     "cumprod", "flip", "selu", "hardsigmoid", "max", "min", "amax", "amin", "argmax", "argmin",
                     "prod", "logsumexp", "log_softmax", "xlogy", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                     "conv_transpose2d", "conv_transpose3d", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d",
                     "avg_pool2d", "avg_pool3d"):
            if getattr(mod, name, None) is target:
                return name
    return None


def dim_ok(d, nd: int) -> bool:
    """d is one dim of an nd-dim tensor, negative ones included (a bool is not a dim)."""
    return isinstance(d, int) and not isinstance(d, bool) and -nd <= d < nd


def needs_layout(node) -> bool:
    """Whether a result with other strides than the reference's would break what follows: a .view
    anywhere downstream (it needs compatible strides; torch ops before it keep a permuted layout),
    or the model returning it as it is (the judge compares a flattened copy of each output)."""
    seen, todo = set(), list(node.users)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "call_method" and n.target in ("view", "view_as") or n.op == "output" and n in node.users:
            return True
        todo.extend(n.users)
    return False


def node_name(node) -> str | None:
    if node.op == "call_method":
        return node.target
    return fn_name(node.target) if node.op == "call_function" else None


def rewrite_nodes(gm, build) -> bool:
    """Replace every node for which build(graph, node) returns a new node (built in place, before
    it; build returns None, having added nothing, for a node it leaves), or (new node, folded): the
    nodes before it its pattern took too, users first, each erased when nothing uses it any more.
    True when anything changed."""
    changed = False
    g = gm.graph
    for node in list(g.nodes):
        with g.inserting_before(node):
            out = build(g, node)
        if out is None:
            continue
        out, folded = out if isinstance(out, tuple) else (out, ())
        node.replace_all_uses_with(out)
        g.erase_node(node)
        for f in folded:
            if not f.users:
                g.erase_node(f)
        changed = True
    if changed:
        gm.recompile()
    return changed
