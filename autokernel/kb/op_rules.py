"""Which traced op becomes which kernel call: the rules that map a torch.fx node (a module call,
a function or a method) to the expression that replaces it in ModelNew's forward. Split by what
they match: the library starters' ops here (LIBRARY, one entry per kernel type, and main_op, which
picks the type whose starter a problem gets), elementwise ops in elementwise.py, the generated
kernel families' ops in pattern_rules.py; OpRules.replacement asks them in turn. A rule returns
None when the call has arguments it does not cover; the op then stays a torch op.
"""

from __future__ import annotations

from dataclasses import dataclass

from autokernel.kb.attention_rewrites import masked_attention
from autokernel.kb.fx_nodes import (dim_ok, fn_name, is_float_tensor, is_number, needs_layout, node_ndim,
                                    node_shape)
from autokernel.kb.elementwise import ElementwiseRules
from autokernel.kb.pattern_rules import DIMRED_OPS, PatternRules
from autokernel.kb.starter_source import starter_constant


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
    flash = qs == ks and vd == qd and qd <= starter_constant("flash_attention", "MAX_HEAD_DIM")
    return {"q": q, "k": k, "v": v, "causal": a.get("is_causal", False), "scale": a.get("scale"), "flash": flash}


@dataclass(frozen=True)
class LibraryType:
    """A kernel type whose library starter can take a problem's main op: the traced calls that are
    that op (function / method names, torch.nn module classes by name), and its helpers, which
    adapt those calls to the starter's entry (templates/lib_<type>.py)."""

    calls: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()

    def takes(self, gm, node) -> bool:
        if node.op == "call_module":
            return any(c.__name__ in self.modules and c.__module__.startswith("torch.nn")
                       for c in type(gm.get_submodule(node.target)).__mro__)
        name = fn_name(node.target) if node.op == "call_function" else node.target
        return node.op in ("call_function", "call_method") and name in self.calls


# one entry per kernel type; rmsnorm (norm_rules.rms_of) and flash_attention (sdpa_call) are found
# by the patterns of their ops instead of by name
LIBRARY = {
    "matmul": LibraryType(("matmul", "mm", "bmm", "linear"), ("Linear",)),
    "layernorm": LibraryType(("layer_norm",), ("LayerNorm",)),
    "softmax": LibraryType(("softmax", "log_softmax"), ("Softmax", "LogSoftmax")),
    "reduce": LibraryType(("sum", "mean")),
    "cross_entropy": LibraryType(("cross_entropy",)),
    "rmsnorm": LibraryType(),
    "flash_attention": LibraryType(),
}


def main_op(gm) -> str | None:
    """The kernel type of LIBRARY whose starter gets the problem's main op, or None."""
    from autokernel.kb.norm_rules import rms_of

    found = []
    for node in gm.graph.nodes:
        if rms_of(node):
            found.append("rmsnorm")
        sdpa = sdpa_call(node)
        if sdpa:  # head dims the flash starter does not take: two bmm of the matmul starter
            found.append("flash_attention" if sdpa["flash"] else "matmul")
            continue
        found.extend(next(([t] for t, lib in LIBRARY.items() if lib.takes(gm, node)), []))
    if "matmul" in found:
        return "matmul"
    # a sum or mean next to another library op is most often its small tail (a mean after a
    # softmax, a row sum of its output): the other op gets the starter
    found.sort(key=lambda f: f == "reduce")
    return found[0] if found else None


class OpRules(PatternRules, ElementwiseRules):
    """All the rules, as a mixin of the emitter (the state they share: rule_base.Rules); the
    library starters' calls here, the elementwise and generated kernels' inherited."""

    def softmax_call(self, node, x, dim, log: bool = False) -> str | None:
        """_kb_softmax (log_softmax with `log`) over one int dim (dim=None, torch's implicit legacy
        choice, stays a torch op)."""
        nd = node_ndim(x) or 0
        if not is_float_tensor(x) or not dim_ok(dim, nd):
            return None
        dim %= nd
        if dim == nd - 1:
            return f"_kb_softmax({self.fmt(x)}, {dim}{', log=True' if log else ''})"
        # a non-last dim comes back as a permuted view: copied to x's layout only where that matters
        return f"_kb_softmax({self.fmt(x)}, {dim}, contiguous={needs_layout(node)}{', log=True' if log else ''})"

    def reduce_call(self, node, name: str, x, rest, kw) -> str | None:
        """_kb_sum / _kb_mean over one dim, a run of adjacent dims, or all of x (dim None)."""
        allk = dict(zip(("dim", "keepdim"), rest), **kw)
        dim, keepdim = allk.get("dim"), allk.get("keepdim", False)
        nd = max(node_ndim(x) or 0, 1)  # a 0-dim tensor takes dim 0 and -1
        if set(allk) - {"dim", "keepdim", "dtype"} or allk.get("dtype") not in (None, x.meta["tensor_meta"].dtype) \
                or not isinstance(keepdim, bool):
            return None
        if dim is not None:
            dims = [dim] if isinstance(dim, int) else list(dim) if isinstance(dim, (list, tuple)) else []
            if not dims or not all(dim_ok(d, nd) for d in dims):
                return None
            dims = sorted(d % nd for d in dims)
            if dims != list(range(dims[0], dims[-1] + 1)):  # not one [outer, R, inner] view of x
                return None
            dim = dims[0] if len(dims) == 1 else tuple(dims)
        elif not keepdim:
            self.whole[node] = (x, name)
        return f"_kb_{name}({self.fmt(x)}, {dim!r}, keepdim={keepdim})"

    def attention_call(self, node) -> str | None:
        """_kb_sdpa / _kb_masked_sdpa / _kb_sdpa_mm for an attention the starters take."""
        sdpa = sdpa_call(node) if self.main in ("flash_attention", "matmul") else None
        if sdpa and sdpa["flash"] and self.main == "matmul":
            # next to the matmul starter, the flash starter comes in as a second one (prefixed)
            self.second = "flash_attention"
        if sdpa and sdpa.get("mask") is not None:
            self.masked = True
            buf, value = sdpa["mask"]
            return (f"_kb_masked_sdpa({self.fmt(sdpa['q'])}, {self.fmt(sdpa['k'])}, {self.fmt(sdpa['v'])}, "
                    f"{self.fmt(buf)}, {self.fmt(value)}, {self.fmt(sdpa['scale'])})")
        # the bmm-softmax-bmm path is only for what the flash kernel does not take
        if sdpa and (sdpa["flash"] or self.main == "matmul"):
            fn = "_kb_sdpa" if sdpa["flash"] else "_kb_sdpa_mm"
            return (f"{fn}({self.fmt(sdpa['q'])}, {self.fmt(sdpa['k'])}, {self.fmt(sdpa['v'])}, "
                    f"causal={sdpa['causal']!r}, scale={self.fmt(sdpa['scale'])})")
        return None

    def replacement(self, node) -> str | None:
        import torch.nn as nn

        args, kw = list(node.args), dict(node.kwargs)
        taken = self.generated_call(node)
        if taken is not None:
            return taken
        attention = self.attention_call(node)
        if attention is not None:
            return attention
        if self.main == "rmsnorm":
            rms = self.rms_call(node)
            if rms is not None:
                return rms
        if node.op == "call_module":
            mod = self.gm.get_submodule(node.target)
            ref = f"self.get_submodule({node.target!r})"
            if isinstance(mod, nn.Linear) and self.main == "matmul" and is_float_tensor(args[0]):
                return f"_kb_linear({self.fmt(args[0])}, {ref}.weight, {ref}.bias)"
            if isinstance(mod, nn.LayerNorm) and self.main == "layernorm" and is_float_tensor(args[0]) \
                    and mod.elementwise_affine and mod.bias is not None:
                return f"_kb_layer_norm({self.fmt(args[0])}, {ref}.weight, {ref}.bias, {ref}.eps)"
            if isinstance(mod, (nn.Softmax, nn.LogSoftmax)) and self.main == "softmax":
                return self.softmax_call(node, args[0], mod.dim, log=isinstance(mod, nn.LogSoftmax))
            return self.ew_module(mod, args[0])
        if node.op == "call_method":
            name = node.target
            if not args:
                return None
            x = args[0]
            rest, kw2 = args[1:], kw
        elif node.op == "call_function":
            name = fn_name(node.target)
            if name is None:
                return None
            x = args[0] if args else kw.get("input")
            rest, kw2 = args[1:], {k: v for k, v in kw.items() if k != "input"}
        else:
            return None
        if name in ("cumsum", "cumprod", "flip", "mul"):
            scan = self.scan_call(node)
            if scan is not None:
                return scan
        if name in DIMRED_OPS:
            return self.dimred_call(node, name, x, rest, kw2)
        ew = self.ew_function(node, name, x, rest, kw2)
        if ew is not None:
            return ew
        if self.main == "matmul" and name in ("matmul", "mm", "bmm") and len(rest) == 1 and not kw2:
            a, b = x, rest[0]
            batched = node_ndim(a) == node_ndim(b) >= 3 and node_shape(a)[:-2] == node_shape(b)[:-2]
            if is_float_tensor(a) and is_float_tensor(b) and (node_ndim(b) == 2 or batched):
                return f"_kb_mm({self.fmt(a)}, {self.fmt(b)})"
        if self.main == "matmul" and name == "linear" and is_float_tensor(x):
            w = rest[0] if rest else kw2.get("weight")
            b = rest[1] if len(rest) > 1 else kw2.get("bias")
            return f"_kb_linear({self.fmt(x)}, {self.fmt(w)}, {self.fmt(b)})"
        if self.main == "softmax" and name in ("softmax", "log_softmax") and is_float_tensor(x):
            # F.softmax traces with its _stacklevel and dtype=None as keywords; a dtype other than
            # x's own is a cast first, which the starter does not do
            allk = dict(zip(("dim", "dtype"), rest), **kw2)
            if set(allk) <= {"dim", "dtype", "_stacklevel"} \
                    and allk.get("dtype") in (None, x.meta["tensor_meta"].dtype):
                return self.softmax_call(node, x, allk.get("dim"), log=name == "log_softmax")
        if self.main == "layernorm" and name == "layer_norm" and is_float_tensor(x):
            allk = dict(zip(("normalized_shape", "weight", "bias", "eps"), rest), **kw2)
            ns = allk.get("normalized_shape")
            if allk.get("weight") is not None and allk.get("bias") is not None and isinstance(ns, (list, tuple)) \
                    and len(ns) >= 1:
                return (f"_kb_layer_norm({self.fmt(x)}, {self.fmt(allk['weight'])}, {self.fmt(allk['bias'])}, "
                        f"{self.fmt(allk.get('eps', 1e-5))})")
        if self.main == "reduce" and name in ("sum", "mean") and is_float_tensor(x):
            return self.reduce_call(node, name, x, rest, kw2)
        if name in ("sum", "mean") and (rest or "dim" in kw2):  # next to another starter: the dim-reduction kernel
            return self.dimred_call(node, name, x, rest, kw2)
        ce_defaults = {"weight": None, "size_average": None, "ignore_index": -100, "reduce": None,
                       "reduction": "mean", "label_smoothing": 0.0}
        if self.main == "cross_entropy" and name == "cross_entropy" and len(rest) == 1 \
                and all(ce_defaults.get(k, object()) == v for k, v in kw2.items()) \
                and node_ndim(x) == 2 and is_float_tensor(x):
            return f"_kb_cross_entropy({self.fmt(x)}, {self.fmt(rest[0])})"
        return None

