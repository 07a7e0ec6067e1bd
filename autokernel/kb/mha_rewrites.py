"""PyTorch's attention modules in a traced problem written out in the ops our kernels take
(KernelBench L3 28 ViT, 31 VisionAttention, 32 CViT): fx keeps nn.MultiheadAttention and
nn.TransformerEncoder(Layer) as single calls, which would leave a problem's dominant work to torch.

- nn.TransformerEncoder -> its layers one after the other, then its final norm, if any;
- nn.TransformerEncoderLayer -> what its forward computes without masks (post-norm
  `x = norm1(x + sa(x)); x = norm2(x + ff(x))`, or pre-norm `x = x + sa(norm1(x)); x = x + ff(norm2(x))`,
  ff = linear2(activation(linear1(x)))), its submodules called by name, so that the rules for
  nn.Linear, the norms and the activations apply to them;
- nn.MultiheadAttention(q, k, v) whose weights output nothing reads ->

      q' = F.linear(q, W_q) + b_q   (k', v' alike; one linear then three chunks when q is k is v)
      h = F.scaled_dot_product_attention(heads(q'), heads(k'), heads(v'))   # scale 1/sqrt(head_dim)
      out = F.linear(merge(h), W_o) + b_o

  with heads() the (L, N, E) -> (N, H, L, E/H) view (batch_first: (N, L, E)) and merge() its
  inverse: the same values as the module's math path, and the flash (or matmul) starter takes the
  attention. Modules with masks, dropout > 0, bias_k / bias_v, add_zero_attn or separate q/k/v
  weights stay torch's, as do dropouts with p > 0 in the layers (left as calls).
Run before the other rewrites (rewrites.rewrite), before shape propagation.
"""

from __future__ import annotations

import operator


def _mask_free(node, names: tuple, start: int) -> bool:
    """The call passes no mask (None or left out) and no causal hint among its extra arguments."""
    extra = dict(zip(names, node.args[start:]), **node.kwargs)
    return set(extra) <= set(names) and all(extra.get(k) in (None, False) for k in names if k != "need_weights")


def _dropout(g, gm, target: str, x):
    """A layer's dropout: none when p == 0 (the identity), else its module called."""
    return x if gm.get_submodule(target).p == 0 else g.call_module(target, (x,))


def _encoder_layer(g, gm, target: str, x):
    """The nodes of nn.TransformerEncoderLayer `target` applied to x (no masks)."""
    import torch.nn as nn

    layer = gm.get_submodule(target)

    def sa(h):
        out = g.call_module(f"{target}.self_attn", (h, h, h), {"need_weights": False})
        return _dropout(g, gm, f"{target}.dropout1", g.call_function(operator.getitem, (out, 0)))

    def ff(h):
        h = g.call_module(f"{target}.linear1", (h,))
        act = layer.activation
        h = g.call_module(f"{target}.activation", (h,)) if isinstance(act, nn.Module) \
            else g.call_function(act, (h,))
        h = g.call_module(f"{target}.linear2", (_dropout(g, gm, f"{target}.dropout", h),))
        return _dropout(g, gm, f"{target}.dropout2", h)

    def norm(i, h):
        return g.call_module(f"{target}.norm{i}", (h,))

    if layer.norm_first:
        x = g.call_function(operator.add, (x, sa(norm(1, x))))
        return g.call_function(operator.add, (x, ff(norm(2, x))))
    x = norm(1, g.call_function(operator.add, (x, sa(x))))
    return norm(2, g.call_function(operator.add, (x, ff(x))))


def rewrite_encoders(gm) -> bool:
    """nn.TransformerEncoder and nn.TransformerEncoderLayer calls without masks -> their layers' ops."""
    import torch.nn as nn

    from autokernel.kb.fx_nodes import rewrite_nodes

    def build(g, node):
        if node.op != "call_module" or len(node.args) < 1:
            return None
        mod = gm.get_submodule(node.target)
        if type(mod) is nn.TransformerEncoderLayer:
            if not _mask_free(node, ("src_mask", "src_key_padding_mask", "is_causal"), 1):
                return None
            return _encoder_layer(g, gm, node.target, node.args[0])
        if type(mod) is nn.TransformerEncoder:
            if not _mask_free(node, ("mask", "src_key_padding_mask", "is_causal"), 1) \
                    or any(type(layer) is not nn.TransformerEncoderLayer for layer in mod.layers):
                return None
            x = node.args[0]
            for i in range(len(mod.layers)):
                x = _encoder_layer(g, gm, f"{node.target}.layers.{i}", x)
            return g.call_module(f"{node.target}.norm", (x,)) if mod.norm is not None else x
        return None

    return rewrite_nodes(gm, build)


def _linear(g, x, w, b):
    import torch.nn.functional as F

    y = g.call_function(F.linear, (x, w))
    return y if b is None else g.call_function(operator.add, (y, b))


def rewrite_mha(gm) -> bool:
    """nn.MultiheadAttention calls our kernels can take (module docstring) -> projections and SDPA:
    their output 0 is rebuilt, then the module calls nothing reads are dropped."""
    import torch.nn.functional as F

    from autokernel.kb.fx_nodes import rewrite_nodes

    def build(g, node):
        if node.op != "call_function" or node.target is not operator.getitem or node.args[1] != 0:
            return None
        call = node.args[0]
        mha = _mha(gm, call) if hasattr(call, "op") else None
        if mha is None:
            return None
        t, E, H = call.target, mha.embed_dim, mha.num_heads
        q, k, v = call.args[:3]
        w_in = g.get_attr(f"{t}.in_proj_weight")
        b_in = g.get_attr(f"{t}.in_proj_bias") if mha.in_proj_bias is not None else None
        if q is k is v:
            qkv = _linear(g, q, w_in, b_in)
            parts = [g.call_function(operator.getitem, (g.call_method("chunk", (qkv, 3, -1)), i)) for i in range(3)]
        else:
            parts = []
            for i, x in enumerate((q, k, v)):
                rows = slice(i * E, (i + 1) * E)
                parts.append(_linear(g, x, g.call_function(operator.getitem, (w_in, rows)),
                                     None if b_in is None else g.call_function(operator.getitem, (b_in, rows))))
        heads = []
        for p in parts:  # (L, N, E) -> (N, H, L, D); batch_first (N, L, E) -> (N, H, L, D)
            p = g.call_method("unflatten", (p, -1, (H, E // H)))
            heads.append(g.call_method("transpose", (p, 1, 2)) if mha.batch_first
                         else g.call_method("permute", (p, 1, 2, 0, 3)))
        o = g.call_function(F.scaled_dot_product_attention, tuple(heads))
        o = g.call_method("transpose", (o, 1, 2)) if mha.batch_first else g.call_method("permute", (o, 2, 0, 1, 3))
        b_out = g.get_attr(f"{t}.out_proj.bias") if mha.out_proj.bias is not None else None
        return _linear(g, g.call_method("flatten", (o, 2)), g.get_attr(f"{t}.out_proj.weight"), b_out)

    if not rewrite_nodes(gm, build):
        return False
    for node in list(gm.graph.nodes):  # rewritten: only unread weights (output 1) are left
        if _mha(gm, node) is not None and not any(u.users for u in node.users):
            for user in list(node.users):
                gm.graph.erase_node(user)
            gm.graph.erase_node(node)
    gm.recompile()
    return True


def _mha(gm, node):
    """The nn.MultiheadAttention module of a call rewrite_mha takes, else None."""
    import torch.nn as nn

    if node.op != "call_module" or len(node.args) < 3:
        return None
    mod = gm.get_submodule(node.target)
    if type(mod) is not nn.MultiheadAttention or not mod._qkv_same_embed_dim or mod.bias_k is not None \
            or mod.add_zero_attn or (mod.dropout and mod.training):
        return None
    names = ("key_padding_mask", "need_weights", "attn_mask", "average_attn_weights", "is_causal")
    extra = dict(zip(names, node.args[3:]), **node.kwargs)
    if set(extra) - set(names) or any(extra.get(k) not in (None, False) for k in ("key_padding_mask", "attn_mask",
                                                                                   "is_causal")):
        return None
    # only the attention output is read: the weights (output 1) are never computed
    users = list(node.users)
    if not all(u.op == "call_function" and u.target is operator.getitem and len(u.args) == 2
               and (u.args[1] == 0 or (u.args[1] == 1 and not u.users)) for u in users):
        return None
    return mod
