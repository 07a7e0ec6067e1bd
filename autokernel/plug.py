"""Put kernels into a live model: what each kernel type replaces, and the route every call takes.

What each kernel type replaces is its hooks' business (autokernel/kernels/<type>/hooks.py, listed
by autokernel.kernels.registry): a module's forward (plug_module: nn.Linear, the norms, SwiGLU
blocks) or a function (plug: F.softmax, transformers' attention and rotary functions, ...).
`Plug.remove()` or the end of `plugged()` restores everything.

Every replaced call goes through its type's Route, which picks the kernel or PyTorch's own path at
that shape (autokernel.dispatch). Inside torch.compile the route calls the kernel's custom op
(autokernel.ops) and touches no Python state, so Dynamo traces it with no graph break and no
recompile; in eager mode it calls the kernel function directly (no dispatcher on the launch path)
and counts calls, fallbacks (a call outside the kernel's contract) and declines (PyTorch is the
faster path at that shape), with the shapes it saw.
"""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch import nn

from autokernel.dispatch import Decisions
from autokernel.kernels import get_spec, registry


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


def _plug_modules(stack: ExitStack, model: nn.Module, routes: dict[str, Route], rep: PlugReport) -> None:
    """Each module goes to the first routed type whose hooks take it."""
    hooks = [(t, registry.hooks(t)) for t in registry.kernel_types() if t in routes]
    for m in model.modules():
        for t, h in hooks:
            forward = h.plug_module(m, routes[t])
            if forward is not None:
                m.forward = forward
                stack.callback(lambda mod=m: mod.__dict__.pop("forward", None))
                rep.sites[t] += 1
                break


def _plug_functions(stack: ExitStack, model: nn.Module, routes: dict[str, Route], rep: PlugReport) -> None:
    for t in registry.kernel_types():
        if t in routes:
            sites = registry.hooks(t).plug(stack, model, routes[t])
            if sites:
                rep.sites[t] += sites


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
            _plug_functions(self._stack, model, self.routes, self._sites)
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
