"""Attention written out op by op in a problem's forward, found as one pattern so that the flash
attention starter computes it (KernelBench L3 43 / 44, minGPT):

    att = (q @ k.transpose(-2, -1)) * scale            # or / c; no scale: 1.0
    att = att.masked_fill(buffer[..., :T, :T] == 0, float('-inf'))      # optional
    att = F.softmax(att, dim=-1)
    att = dropout(att)                                 # p == 0 only: the identity
    y = att @ v

becomes F.scaled_dot_product_attention(q, k, v, scale=scale) without the mask, and
`masked_attention(q, k, v, buffer_slice, value, scale)` with it: the same values (its reference
below is the pattern itself); the emitter's `_kb_masked_sdpa` runs the flash kernel with
is_causal when the buffer slice equals `value` exactly on the strict upper triangle (checked once
per buffer version, as minGPT's registered tril buffer is), and the reference's ops otherwise.
Each folded node must have the chain as its only user.
"""

from __future__ import annotations


def masked_attention(q, k, v, buf, value, scale):
    """softmax((q @ k^T) * scale masked to -inf where buf == value) @ v."""
    import torch

    att = torch.matmul(q, k.transpose(-2, -1)) * scale
    att = att.masked_fill(buf == value, float("-inf"))
    return torch.matmul(torch.softmax(att, dim=-1), v)


def _name(node):
    import operator

    from autokernel.kb.fx_nodes import node_name

    if not hasattr(node, "op"):
        return None
    if node.op == "call_function" and node.target is operator.eq:
        return "eq"
    return node_name(node)


def _only(node, user) -> bool:
    return hasattr(node, "users") and len(node.users) == 1 and user in node.users


def _skip_dropout(gm, node):
    """The input of an identity dropout (p == 0), else node itself."""
    import torch.nn as nn
    import torch.nn.functional as F

    while True:
        if node.op == "call_module" and type(gm.get_submodule(node.target)) is nn.Dropout \
                and gm.get_submodule(node.target).p == 0 and len(node.args) == 1:
            node = node.args[0]
        elif node.op == "call_function" and node.target is F.dropout and node.args \
                and dict(zip(("input", "p"), node.args), **node.kwargs).get("p", 0.5) == 0:
            node = node.args[0]
        else:
            return node


def _softmax_input(gm, node):
    import torch.nn as nn

    if node.op == "call_module" and type(gm.get_submodule(node.target)) is nn.Softmax \
            and gm.get_submodule(node.target).dim in (-1, 3):
        return node.args[0]
    if _name(node) == "softmax" and node.args:
        rest = dict(zip(("dim",), node.args[1:]), **{k: v for k, v in node.kwargs.items() if k != "_stacklevel"})
        if rest.get("dim") in (-1, 3) and rest.get("dtype") is None and set(rest) <= {"dim", "dtype"}:
            return node.args[0]
    return None


def _transposed_k(node):
    if _name(node) != "transpose" or len(node.args) != 3 or node.kwargs:
        return None
    if {a % 4 for a in node.args[1:] if isinstance(a, int)} != {2, 3}:
        return None
    return node.args[0]


def find_attention(gm, node) -> dict | None:
    """For the matmul finishing an attention: {q, k, v, scale, mask: (buffer node, value) | None,
    folded: [nodes]}; else None."""
    from autokernel.kb.fx_nodes import is_float_tensor, is_number, node_ndim

    if _name(node) not in ("matmul",) or len(node.args) != 2 or node.kwargs:
        return None
    p, v = node.args
    folded = []
    probs = _skip_dropout(gm, p)
    x = _softmax_input(gm, probs) if hasattr(probs, "op") else None
    if x is None:
        return None
    n = p
    while n is not probs:  # the dropouts between softmax and the matmul
        folded.append(n)
        n = n.args[0]
    folded.append(probs)
    mask = None
    if _name(x) == "masked_fill" and len(x.args) == 3 and x.args[2] == float("-inf"):
        eq = x.args[1]
        if _name(eq) == "eq" and len(eq.args) == 2 and is_number(eq.args[1]) and _only(eq, x) \
                and eq.args[0].op in ("get_attr", "call_function"):
            mask = (eq.args[0], eq.args[1])
            folded += [x, eq]
            x = x.args[0]
        else:
            return None
    scale = 1.0
    if _name(x) in ("mul", "truediv") and len(x.args) == 2 and not x.kwargs:
        a, b = x.args
        if _name(x) == "mul" and is_number(a):
            a, b = b, a
        if is_number(b) and b:
            scale = float(b) if _name(x) == "mul" else 1.0 / float(b)
            folded.append(x)
            x = a
    if _name(x) != "matmul" or len(x.args) != 2:
        return None
    q, kt = x.args
    k = _transposed_k(kt)
    folded.append(x)
    if k is None or not all(is_float_tensor(t) and node_ndim(t) == 4 for t in (q, k, v)):
        return None
    if _only(kt, x):
        folded.append(kt)
    if any(len(f.users) != 1 for f in folded if f is not kt):
        return None
    from autokernel.kernels.flash_attention.kb_rules import flash_takes

    if mask is not None and not flash_takes(q, k, v):  # only the flash kernel's causal path is faster
        return None
    return {"q": q, "k": k, "v": v, "scale": scale, "mask": mask, "folded": folded}


def rewrite_attention(gm) -> bool:
    import torch.nn.functional as F

    from autokernel.kb.fx_nodes import rewrite_nodes

    def build(g, node):
        a = find_attention(gm, node)
        if a is None:
            return None
        if a["mask"] is None:
            out = g.call_function(F.scaled_dot_product_attention, (a["q"], a["k"], a["v"]), {"scale": a["scale"]})
        else:
            out = g.call_function(masked_attention, (a["q"], a["k"], a["v"], *a["mask"], a["scale"]))
        return out, a["folded"]  # users first: the list runs from the output back
    return rewrite_nodes(gm, build)
