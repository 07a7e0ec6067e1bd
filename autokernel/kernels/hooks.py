"""What a kernel type does outside its kernel: how profile finds it in a model, how plug routes it.

Each type's hooks.py defines HOOKS, an instance of a Hooks subclass; profile and plug iterate over
the registry (autokernel.kernels.registry) and ask every type's hooks, so neither names a type.

Profile (autokernel.profile):
- `aten_ops`: aten ops that are the type on their own; `op_shape` reads a call's shape from the
  profiler's recorded input shapes.
- `claims_module` / `module_shapes`: a module whose whole forward is the type (profile times it
  inside a range "ak::<type>::<class name>").
- `instrument(ctx)`: functions to wrap in such a range (transformers' attention, rotary).
Plug (autokernel.plug, which autokernel.apply uses):
- `plug_module(m, route)`: a replacement forward for a module the type takes, or None.
- `plug(stack, model, route)`: function-level replacements (F.softmax, attention registries);
  returns how many sites it replaced.
`route` is a plug.Route: route.pick(*args) says whether the kernel takes a call (args as the
kernel's reference takes them), route.run(*args) runs it, route.not_covered() counts a call outside
the kernel's contract. A type's hooks run only when the type has a route.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from math import prod
from typing import Any, Callable

import torch
from torch import nn

Shape = dict[str, int]


class Hooks:
    """The defaults: a type that profile sees through no op and plug puts nowhere."""

    aten_ops: tuple[str, ...] = ()

    def op_shape(self, op: str, shapes: list[list[int]]) -> Shape | None:
        """The spec's shape dict from an aten op's non-empty input shapes (IndexError or TypeError
        on a shape list it does not expect: the call counts, its shape does not)."""
        return None

    def claims_module(self, m: nn.Module) -> bool:
        return False

    def module_shapes(self, m: nn.Module, x: torch.Tensor) -> list[Shape]:
        """Shapes of one call of a claimed module, from its first (tensor) argument."""
        return [rows_cols(x)]

    def instrument(self, ctx: Any) -> None:
        """Wrap functions in the type's profiler range: ctx.patch(obj, attr, new) (undone
        afterwards), ctx.on_exit(fn), ctx.range(label, shapes) (a context manager that records a
        call's shapes and times what runs inside it as this type)."""

    def plug_module(self, m: nn.Module, route: Any) -> Callable | None:
        return None

    def plug(self, stack: ExitStack, model: nn.Module, route: Any) -> int:
        return 0


# -- helpers the types share ----------------------------------------------------------------------

def rows_cols(x: torch.Tensor) -> Shape:
    cols = x.shape[-1] if x.dim() else 1
    return {"rows": x.numel() // max(cols, 1), "cols": cols}


def rows_last(shape: list[int], last: str = "cols") -> Shape:
    """A recorded input shape [..., n] as {"rows": product of the leading dims, last: n}."""
    return {"rows": prod(shape[:-1]), last: shape[-1]}


def flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


def modeling_modules(attr: str | None = None) -> list[Any]:
    """transformers' loaded modeling modules (those with a callable `attr`, when given)."""
    return [m for n, m in list(sys.modules.items())
            if n.startswith("transformers.models.") and ".modeling_" in n and m is not None
            and (attr is None or callable(getattr(m, attr, None)))]


def patch_attr(stack: ExitStack, obj: Any, name: str, value: Any) -> None:
    """Set obj.name until the stack closes."""
    own = vars(obj)
    if name in own:
        stack.callback(setattr, obj, name, own[name])
    else:  # inherited (torch.Tensor.sum is TensorBase's): removed again, not left behind as a copy
        stack.callback(delattr, obj, name)
    setattr(obj, name, value)


def flat_forward(route: Any, m: nn.Module, params: Callable) -> Callable:
    """A forward for a row-wise module (norms): x flattened to rows, then params(m)."""
    orig = m.forward

    def forward(x):
        args = (flat(x), *params(m))
        if not route.pick(*args):
            return orig(x)
        return route.run(*args).reshape(x.shape)
    return forward
