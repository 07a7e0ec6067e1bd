"""How the KB compiler maps a traced problem's attention to the flash starter (kb_helper.py):
F.scaled_dot_product_attention within the starter's contract, and the masked attention
kb/attention_rewrites.py finds written op by op (kb_masked.py: the causal one by the flash kernel).
Next to the matmul starter it comes in as a second starter in the file."""

from __future__ import annotations

from autokernel.kb.attention_rewrites import masked_attention
from autokernel.kb.fx_nodes import fn_name, is_float_tensor, is_number, node_ndim, node_shape
from autokernel.kb.rule_base import LibraryRule
from autokernel.kb.starter_source import starter_constant


def flash_takes(q, k, v) -> bool:
    """The flash starter computes attention of these (4-D, same length and head dim, within its budget)."""
    (qb, qh, qs, qd), (kb, kh, ks, kd), vs = node_shape(q), node_shape(k), node_shape(v)
    return qb == kb and qs == ks and qd == kd and vs == (kb, kh, ks, kd) and qh % kh == 0 \
        and qd <= starter_constant("flash_attention", "MAX_HEAD_DIM")


def sdpa_call(node) -> dict | None:
    """F.scaled_dot_product_attention's arguments when our kernels can compute it: 4-D q, k, v of
    one float dtype, no attn_mask, no dropout, constant is_causal/scale; "flash" says whether the
    flash starter takes it (same q/kv length and head dim, head dim within its budget)."""
    if node.op == "call_function" and node.target is masked_attention:  # the rewrite checked flash_takes
        q, k, v, buf, value, scale = node.args
        return {"q": q, "k": k, "v": v, "mask": (buf, value), "causal": False, "scale": scale, "flash": True}
    if node.op != "call_function" or fn_name(node.target) != "scaled_dot_product_attention":
        return None
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    a = dict(zip(names, node.args), **node.kwargs)
    q, k, v = a.get("query"), a.get("key"), a.get("value")
    if set(a) - set(names) or not all(is_float_tensor(t) and node_ndim(t) == 4 for t in (q, k, v)):
        return None
    if a.get("attn_mask") is not None or a.get("dropout_p", 0.0) != 0.0 \
            or not isinstance(a.get("is_causal", False), bool) or not isinstance(a.get("enable_gqa", False), bool) \
            or not (a.get("scale") is None or is_number(a.get("scale"))):
        return None
    (qb, qh, qs, qd), (kb, kh, ks, kd), (vb, vh, vs, vd) = (tuple(t.meta["tensor_meta"].shape) for t in (q, k, v))
    dtypes = {t.meta["tensor_meta"].dtype for t in (q, k, v)}
    if len(dtypes) != 1 or qb != kb or (kb, kh, ks) != (vb, vh, vs) or qd != kd or qh % kh \
            or (qh != kh and not a.get("enable_gqa")):
        return None
    return {"q": q, "k": k, "v": v, "causal": a.get("is_causal", False), "scale": a.get("scale"),
            "flash": flash_takes(q, k, v)}


class FlashAttentionRule(LibraryRule):
    def finds(self, gm, node) -> str | None:
        sdpa = sdpa_call(node)  # head dims the flash starter does not take: two bmm of the matmul starter
        return None if sdpa is None else self.kernel_type if sdpa["flash"] else "matmul"

    def pattern_call(self, rules, node) -> str | None:
        return self.attention_call(rules, node)

    def attention_call(self, rules, node) -> str | None:
        """_kb_sdpa / _kb_masked_sdpa / _kb_sdpa_mm for an attention the starters take (the flash
        starter's, as a second one when the main starter is another: matmul's)."""
        sdpa = sdpa_call(node)
        if sdpa and sdpa["flash"] and rules.main != self.kernel_type:
            rules.second = self.kernel_type
        if sdpa and sdpa.get("mask") is not None:
            rules.extras[(self.kernel_type, "kb_masked")] = True
            buf, value = sdpa["mask"]
            return (f"_kb_masked_sdpa({rules.fmt(sdpa['q'])}, {rules.fmt(sdpa['k'])}, {rules.fmt(sdpa['v'])}, "
                    f"{rules.fmt(buf)}, {rules.fmt(value)}, {rules.fmt(sdpa['scale'])})")
        # the bmm-softmax-bmm path (the matmul starter's) is only for what the flash kernel does not take
        if sdpa and (sdpa["flash"] or rules.main != self.kernel_type):
            fn = "_kb_sdpa" if sdpa["flash"] else "_kb_sdpa_mm"
            return (f"{fn}({rules.fmt(sdpa['q'])}, {rules.fmt(sdpa['k'])}, {rules.fmt(sdpa['v'])}, "
                    f"causal={sdpa['causal']!r}, scale={rules.fmt(sdpa['scale'])})")
        return None


RULE = FlashAttentionRule("flash_attention")
