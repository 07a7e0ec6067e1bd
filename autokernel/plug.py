"""Put kernels into a live model: what each kernel type replaces, and the route every call takes.

What each kernel type replaces (`Plug.remove()` or the end of `plugged()` restores everything):
- matmul: every nn.Linear (x2d @ W.t() + bias) and transformers' Conv1D (GPT-2: x2d @ W + bias).
- rmsnorm: every module named …RMSNorm with a weight and an eps (LLaMA's).
- layernorm: every nn.LayerNorm over the last dim.
- fused_mlp: every SwiGLU block (gate_proj/up_proj/down_proj without biases, SiLU).
- flash_attention: an "autokernel" entry in transformers' attention registry (and its mask
  registry), selected through config._attn_implementation; calls with a padding mask or with keys
  longer than queries (KV cache) go to SDPA.
- softmax: torch.nn.functional.softmax over the last dim (eager attention uses it).
- rotary_embedding: apply_rotary_pos_emb in every loaded transformers modeling module, when the
  positions are the same for the whole batch (cos/sin of batch 1, as LLaMA builds them by default).
- cross_entropy: torch.nn.functional.cross_entropy with class-index targets, mean or sum
  reduction (transformers' LM loss when labels are given).
- reduce: torch.sum / Tensor.sum over the last dim of a floating tensor (no dtype, no keepdim).

Every replaced call goes through its type's Route, which picks the kernel or PyTorch's own path at
that shape (autokernel.dispatch). Inside torch.compile the route calls the kernel's custom op
(autokernel.ops) and touches no Python state, so Dynamo traces it with no graph break and no
recompile; in eager mode it calls the kernel function directly (no dispatcher on the launch path)
and counts calls, fallbacks (a call outside the kernel's contract) and declines (PyTorch is the
faster path at that shape), with the shapes it saw.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.dispatch import Decisions
from autokernel.kernels import get_spec
from autokernel.profile import is_swiglu_mlp

ATTN_NAME = "autokernel"


@dataclass
class PlugReport:
    calls: Counter = field(default_factory=Counter)  # kernel type -> calls into the kernel
    fallbacks: Counter = field(default_factory=Counter)  # kernel type -> calls outside its contract
    declined: Counter = field(default_factory=Counter)  # kernel type -> calls PyTorch was faster for
    sites: Counter = field(default_factory=Counter)  # kernel type -> modules / functions replaced
    shapes: dict[str, Counter] = field(default_factory=dict)  # kernel type -> (shape, dtype) -> calls


class Route:
    """One kernel type's way into the model: kernel or PyTorch, call by call."""

    def __init__(self, kernel_type: str, fn: Callable, op: Callable | None = None,
                 decisions: Decisions | None = None):
        self.kernel_type = kernel_type
        self.spec = get_spec(kernel_type)
        self.fn = fn  # eager path
        self.op = op if op is not None else fn  # traced path: the custom op
        self.decisions = decisions or Decisions(kernel_type, defaults={"eager": True, "compile": True})
        self._yes, self._no = self.decisions.compile_sets()
        self._compile_default = self.decisions.defaults["compile"]
        self._eager: dict[tuple, bool] = {}
        self._keys: dict[tuple, tuple[str, str]] = {}  # argument shapes -> (shape label, dtype)
        self.calls = self.fallbacks = self.declined = 0
        self.shapes: Counter = Counter()

    def _compiled_use(self, args: tuple) -> bool:
        key = self.spec.call_key(args)
        return key in self._yes or (self._compile_default and key not in self._no)

    def pick(self, *args) -> bool:
        """Whether the kernel takes this call (args as the kernel takes them); counts in eager mode.
        False: the caller runs PyTorch's own code for the call instead."""
        if torch.compiler.is_compiling():  # constant while Dynamo traces: no Python state below
            return self._compiled_use(args)
        fast = tuple(a.shape if isinstance(a, torch.Tensor) else a for a in args) + (args[0].dtype,)
        use = self._eager.get(fast)
        if use is None:
            key = self._keys[fast] = self.spec.call_key(args)
            use = self._eager[fast] = self.decisions.use("eager", *key)
        if use and torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            use = False  # the kernels are forward-only: training keeps PyTorch's autograd
        if use:
            self.calls += 1
            self.shapes[fast] += 1
        else:
            self.declined += 1
        return use

    def run(self, *args):
        """The kernel: its custom op inside a compiled graph, the function itself in eager mode."""
        return self.op(*args) if torch.compiler.is_compiling() else self.fn(*args)

    def not_covered(self) -> None:
        """Count a call the kernel's contract does not cover (the caller runs PyTorch's code)."""
        if not torch.compiler.is_compiling():
            self.fallbacks += 1

    def seen_keys(self) -> Counter:
        """(shape label, dtype) -> calls into the kernel, from the eager calls so far."""
        out: Counter = Counter()
        for fast, n in self.shapes.items():
            out[self._keys[fast]] += n
        return out


def as_route(kernel_type: str, kernel: Any, decisions: Decisions | None = None) -> Route:
    """A Route from a KernelOp (autokernel.ops), or from a bare kernel function (eager only)."""
    if isinstance(kernel, Route):
        return kernel
    fn, op = getattr(kernel, "fn", kernel), getattr(kernel, "op", None)
    return Route(kernel_type, fn, op, decisions)


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


def _patch_forward(stack: ExitStack, module: nn.Module, forward: Callable) -> None:
    module.forward = forward
    stack.callback(lambda: module.__dict__.pop("forward", None))


def _patch_attr(stack: ExitStack, obj: Any, name: str, value: Any) -> None:
    own = vars(obj)
    if name in own:
        stack.callback(setattr, obj, name, own[name])
    else:  # inherited (torch.Tensor.sum is TensorBase's): removed again, not left behind as a copy
        stack.callback(delattr, obj, name)
    setattr(obj, name, value)


def _silu_act(m: nn.Module) -> bool:
    act = getattr(m, "act_fn", None)
    return isinstance(act, nn.SiLU) or type(act).__name__ in ("SiLU", "SiLUActivation")


def _plug_modules(stack: ExitStack, model: nn.Module, routes: dict[str, Route], rep: PlugReport) -> None:
    for m in model.modules():
        cls = type(m).__name__
        site = None
        if "fused_mlp" in routes and is_swiglu_mlp(m) and _silu_act(m) and all(
                getattr(m, n).bias is None for n in ("gate_proj", "up_proj", "down_proj")):
            site = "fused_mlp", _mlp_forward(routes["fused_mlp"], m)
        elif "matmul" in routes and isinstance(m, nn.Linear):
            site = "matmul", _linear_forward(routes["matmul"], m, transposed=True)
        elif "matmul" in routes and cls == "Conv1D" and getattr(m, "weight", None) is not None:
            site = "matmul", _linear_forward(routes["matmul"], m, transposed=False)  # GPT-2: weight [in, out]
        elif "rmsnorm" in routes and cls.endswith("RMSNorm") and getattr(m, "weight", None) is not None:
            eps = getattr(m, "variance_epsilon", getattr(m, "eps", None))
            if eps is not None:
                site = "rmsnorm", _norm_forward(routes["rmsnorm"], m, lambda mm: (mm.weight, float(eps)))
        elif "layernorm" in routes and isinstance(m, nn.LayerNorm) and len(m.normalized_shape) == 1 \
                and m.elementwise_affine:
            zeros = torch.zeros_like(m.weight) if m.bias is None else None
            site = "layernorm", _norm_forward(routes["layernorm"], m, lambda mm: (
                mm.weight, mm.bias if mm.bias is not None else zeros, float(mm.eps)))
        if site is not None:
            _patch_forward(stack, m, site[1])
            rep.sites[site[0]] += 1


def _mlp_forward(route: Route, m: nn.Module) -> Callable:
    orig = m.forward

    def forward(x):
        args = (_flat(x), m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight)
        if not route.pick(*args):
            return orig(x)
        y = route.run(*args)
        return y.reshape(*x.shape[:-1], y.shape[-1])
    return forward


def _linear_forward(route: Route, m: nn.Module, transposed: bool) -> Callable:
    orig = m.forward

    def forward(x):
        args = (_flat(x), m.weight.t() if transposed else m.weight)
        if not route.pick(*args):
            return orig(x)
        y = route.run(*args)
        if m.bias is not None:
            y = y + m.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])
    return forward


def _norm_forward(route: Route, m: nn.Module, params: Callable) -> Callable:
    orig = m.forward

    def forward(x):
        args = (_flat(x), *params(m))
        if not route.pick(*args):
            return orig(x)
        return route.run(*args).reshape(x.shape)
    return forward


def _plug_attention(stack: ExitStack, model: nn.Module, route: Route, rep: PlugReport) -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    from transformers.modeling_utils import AttentionInterface

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
        causal = is_causal if is_causal is not None else bool(getattr(module, "is_causal", False))
        causal = causal and query.shape[2] > 1
        covered = attention_mask is None and key.shape[2] == query.shape[2] and not dropout
        if not covered:
            route.not_covered()
        if covered and route.pick(query, key, value, causal, scaling):
            return route.run(query, key, value, causal, scaling).transpose(1, 2).contiguous(), None
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)

    registry = AttentionInterface._global_mapping
    mask_registry = type(ALL_MASK_ATTENTION_FUNCTIONS)._global_mapping
    registry[ATTN_NAME] = attention
    mask_registry[ATTN_NAME] = causal_prefill_mask(sdpa_mask)
    stack.callback(registry.pop, ATTN_NAME, None)
    stack.callback(mask_registry.pop, ATTN_NAME, None)
    configs = {id(c): c for c in (getattr(m, "config", None) for m in model.modules())
               if c is not None and hasattr(c, "_attn_implementation")}
    for cfg in configs.values():
        old = cfg._attn_implementation
        # set the private field directly: the public setter validates against installed backends
        cfg.__dict__["_attn_implementation_internal"] = ATTN_NAME
        stack.callback(cfg.__dict__.__setitem__, "_attn_implementation_internal", old)
        rep.sites["flash_attention"] += 1


def causal_prefill_mask(sdpa_mask: Callable) -> Callable:
    """transformers' SDPA mask builder, except that a prefill with no padding mask (queries and keys
    the same positions, nothing cached) gets no mask at all: the call is then plainly causal, which the
    kernel, or SDPA with is_causal, computes without reading a mask. transformers drops that mask
    itself in eager mode, but (up to 5.17 at least) not while torch.compile traces, where it cannot
    look at a padding mask's values; with no padding mask given there is nothing to look at."""
    import inspect

    from transformers.masking_utils import causal_mask_function

    names = list(inspect.signature(sdpa_mask).parameters)

    def mask(*args, **kwargs):
        p = dict(zip(names, args))
        p.update(kwargs)
        offsets = [p.get("q_offset", 0), p.get("kv_offset", 0)]
        if (p.get("attention_mask") is None and p.get("local_size") is None and p.get("allow_is_causal_skip", True)
                and p.get("mask_function", causal_mask_function) is causal_mask_function
                and all(isinstance(o, int) and o == 0 for o in offsets)
                and isinstance(p.get("q_length"), int) and p.get("q_length") == p.get("kv_length")):
            return None
        return sdpa_mask(*args, **kwargs)
    return mask


def _plug_rotary(stack: ExitStack, route: Route, rep: PlugReport) -> None:
    mods = [m for n, m in list(sys.modules.items())
            if n.startswith("transformers.models.") and ".modeling_" in n and m is not None
            and callable(getattr(m, "apply_rotary_pos_emb", None))]
    for mod in mods:
        original = mod.apply_rotary_pos_emb

        def rotary(q, k, cos, sin, *args, _orig=original, **kwargs):
            unsq = kwargs.get("unsqueeze_dim", args[0] if args else 1)
            # one [S, D] table for the whole batch: cos/sin of batch 1 (positions shared by the batch)
            if unsq != 1 or q.dim() != 4 or cos.dim() != 3 or cos.shape[0] != 1 or cos.shape[-1] != q.shape[-1]:
                route.not_covered()
                return _orig(q, k, cos, sin, *args, **kwargs)
            c, s = cos[0].to(q.dtype), sin[0].to(q.dtype)
            # q and k have their own shapes (GQA): each is routed on its own
            use_q, use_k = route.pick(q, c, s), route.pick(k, c, s)
            if not (use_q or use_k):
                return _orig(q, k, cos, sin, *args, **kwargs)
            qo = route.run(q, c, s) if use_q else _orig(q, q, cos, sin, *args, **kwargs)[0]
            ko = route.run(k, c, s) if use_k else _orig(k, k, cos, sin, *args, **kwargs)[0]
            return qo, ko
        _patch_attr(stack, mod, "apply_rotary_pos_emb", rotary)
        rep.sites["rotary_embedding"] += 1


def _plug_functional(stack: ExitStack, routes: dict[str, Route], rep: PlugReport) -> None:
    if "softmax" in routes:
        route, orig_softmax = routes["softmax"], F.softmax

        def softmax(input, dim=None, _stacklevel=3, dtype=None):
            if dim is None or input.dim() == 0 or dim not in (-1, input.dim() - 1) or not input.is_floating_point():
                route.not_covered()
            else:
                x = input if dtype is None else input.to(dtype)
                if route.pick(_flat(x)):
                    return route.run(_flat(x)).reshape(x.shape)
            return orig_softmax(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)
        _patch_attr(stack, F, "softmax", softmax)
        rep.sites["softmax"] += 1
    if "cross_entropy" in routes:
        route, orig_ce = routes["cross_entropy"], F.cross_entropy

        def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                          reduction="mean", label_smoothing=0.0):
            plain = (weight is None and size_average is None and reduce is None and label_smoothing == 0.0
                     and input.dim() == 2 and target.dim() == 1 and target.dtype == torch.int64
                     and reduction in ("mean", "sum"))
            if not plain:
                route.not_covered()
            elif route.pick(input, target, ignore_index):
                loss = route.run(input, target, ignore_index)
                if reduction == "sum":
                    loss = loss * (target != ignore_index).sum()
                return loss.to(input.dtype) if input.dtype != torch.float32 and reduction == "mean" else loss
            return orig_ce(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)
        _patch_attr(stack, F, "cross_entropy", cross_entropy)
        rep.sites["cross_entropy"] += 1
    if "reduce" in routes:
        route, orig_sum, orig_tsum = routes["reduce"], torch.sum, torch.Tensor.sum

        def _last_dim_sum(orig, x, *args, **kwargs):
            dim = args[0] if args else kwargs.get("dim")
            extra = args[1:] or {k: v for k, v in kwargs.items() if k != "dim" and v not in (None, False)}
            if (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() >= 1 and not extra
                    and dim in (-1, x.dim() - 1) and x.numel() > 0 and route.pick(_flat(x))):
                return route.run(_flat(x)).reshape(x.shape[:-1])
            return orig(x, *args, **kwargs)

        _patch_attr(stack, torch, "sum", lambda x, *a, **k: _last_dim_sum(orig_sum, x, *a, **k))
        _patch_attr(stack, torch.Tensor, "sum", lambda x, *a, **k: _last_dim_sum(orig_tsum, x, *a, **k))
        rep.sites["reduce"] += 1


class Plug:
    """Kernels routed into a model until remove() (or the end of a `with` block)."""

    def __init__(self, model: nn.Module, kernels: dict[str, Any], decisions: dict[str, Decisions] | None = None):
        self.model = model
        decisions = decisions or {}
        self.routes = {t: as_route(t, k, decisions.get(t)) for t, k in kernels.items()}
        self._stack = ExitStack()
        self._sites = PlugReport()
        try:
            _plug_modules(self._stack, model, self.routes, self._sites)
            if "flash_attention" in self.routes:
                _plug_attention(self._stack, model, self.routes["flash_attention"], self._sites)
            if "rotary_embedding" in self.routes:
                _plug_rotary(self._stack, self.routes["rotary_embedding"], self._sites)
            _plug_functional(self._stack, self.routes, self._sites)
        except BaseException:
            self._stack.close()
            raise

    @property
    def report(self) -> PlugReport:
        rep = PlugReport(sites=Counter(self._sites.sites))
        for t, r in self.routes.items():
            rep.calls[t], rep.fallbacks[t], rep.declined[t] = r.calls, r.fallbacks, r.declined
            rep.shapes[t] = r.seen_keys()
        rep.calls, rep.fallbacks, rep.declined = (+rep.calls, +rep.fallbacks, +rep.declined)  # drop zeros
        return rep

    def reset_counts(self) -> None:
        for r in self.routes.values():
            r.calls = r.fallbacks = r.declined = 0
            r.shapes.clear()

    def remove(self) -> None:
        self._stack.close()

    def __enter__(self) -> "Plug":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


@contextmanager
def plugged(model: nn.Module, kernels: dict[str, Any],
            decisions: dict[str, Decisions] | None = None) -> Iterator["_LiveReport"]:
    """Route `model`'s ops of each given kernel type through kernels[type] (a KernelOp or a kernel
    function) for the block; yields a report whose counters are read when used."""
    with Plug(model, kernels, decisions) as plug:
        yield _LiveReport(plug)


class _LiveReport:
    """PlugReport's fields, read from the routes at the time they are read."""

    def __init__(self, plug: Plug):
        self._plug = plug

    def __getattr__(self, name: str):
        return getattr(self._plug.report, name)
