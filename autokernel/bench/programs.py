"""Inside the worker: which program did one call of the candidate run? (issue 18)

Most of what a search proposes for a kernel changes a tunable that the kernel's model shapes never
reach: a GEMV path, a split-K threshold, a padding rule for unaligned sizes. Such a candidate runs
the very program the best version runs; judging it in full costs seconds to tens of seconds and can
only measure noise (LLaMA-7B's matmul, H100, run 8: 28 full judgements in 469 s, ~26 of them within
1.5% of the best). `digest` names the program of one call: the ordered Triton launches (the kernel's
code, its specialization, constexprs, launch options and grid) and the torch operations around them
(aten op, tensor shapes, strides and dtypes, scalar arguments). Two configurations with equal digests
at every model shape compute the same thing the same way there; the loop then leaves the candidate
at its screen (loop_experiments.py).

A kernel is named by its Python bytecode and the values it reads from its module (constexpr globals,
the kernels it calls), not by Triton's cache key, which holds the file and line the kernel came from
(each candidate has its own worktree). No digest (None) when the call launched no Triton kernel
through `kernel[grid]` (CUDA C++, a pure torch call) or, on a GPU, when Triton's launch hook counted a
launch the record did not see (a compiled kernel called directly): the loop then judges as before.

The call runs outside the judge's integrity checks, with Triton's run() wrapped and the launcher's
cached path off (kernels/launcher.py PLAIN); everything is put back before the judge checks again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import types
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autokernel.bench.launches import triton_classes
from autokernel.kernels import launcher

_PLAIN_VALUES = (int, float, bool, str, type(None))


def describe(value: Any) -> Any:
    """A JSON-able description of an argument: what the program depends on, not its data."""
    if isinstance(value, torch.Tensor):
        return ["T", str(value.dtype), list(value.shape), list(value.stride()), value.device.type,
                value.data_ptr() % 16 == 0]
    if isinstance(value, _PLAIN_VALUES):
        return [type(value).__name__, value]
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): describe(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return str(value)
    inner = getattr(value, "value", None)  # tl.constexpr
    if inner is not None and type(value).__name__ == "constexpr":
        return describe(inner)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a TMA TensorDescriptor: its block shape
        return [type(value).__name__, describe({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})]
    return type(value).__name__


def _code_parts(code: types.CodeType, out: list, names: set) -> None:
    out.append(code.co_code.hex())
    out.append(list(code.co_varnames))
    names.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_parts(c, out, names)
        else:
            out.append(repr(c))


def _python_function(obj: Any):
    """The Python function behind a JIT function, an interpreted one or an autotuner, or None."""
    while not isinstance(obj, types.FunctionType):
        inner = getattr(obj, "fn", None)
        if inner is None or inner is obj:
            return None
        obj = inner
    return obj


def identity(fn: Any, _seen: dict | None = None) -> str:
    """A kernel's code and what it reads from its module, hashed; independent of the file it is in."""
    seen = {} if _seen is None else _seen
    py = _python_function(fn)
    if py is None:
        return type(fn).__name__
    if id(py) in seen:
        return seen[id(py)] or f"recursion:{py.__name__}"
    seen[id(py)] = None
    parts: list = [py.__name__]
    names: set = set()
    _code_parts(py.__code__, parts, names)
    parts.append(describe(py.__defaults__ or ()))
    for name in sorted(names):
        if name not in py.__globals__:
            continue  # an attribute name (tl.arange's "arange"), a builtin
        value = py.__globals__[name]
        if isinstance(value, types.ModuleType):
            parts.append([name, "module", value.__name__])
        elif getattr(_python_function(value), "__module__", None) == py.__module__:
            parts.append([name, identity(value, seen)])  # a kernel or helper of the same file
        elif type(value).__name__ == "constexpr" or isinstance(value, _PLAIN_VALUES + (tuple, list, dict)):
            parts.append([name, describe(value)])  # a value it reads (constexpr is callable: first)
        elif callable(value):
            parts.append([name, getattr(value, "__module__", ""), getattr(value, "__qualname__", type(value).__name__)])
        else:
            parts.append([name, describe(value)])
    digest = hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]
    seen[id(py)] = digest
    return digest


class _AtenLog(TorchDispatchMode):
    """Every aten op of the call, except those Triton itself makes while launching."""

    def __init__(self, events: list):
        super().__init__()
        self.events = events
        self.inside_triton = 0

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        if not self.inside_triton:
            self.events.append(["aten", str(func), describe(list(args)), describe(kwargs or {})])
        return func(*args, **(kwargs or {}))


def _grid(fn_self: Any, grid: Any, args: tuple, kwargs: dict) -> Any:
    if not callable(grid):
        return describe(grid)
    py = _python_function(fn_self)
    bound = {}
    if py is not None:
        params = list(inspect.signature(py).parameters.values())
        bound = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
        bound.update(zip((p.name for p in params), args))
    bound.update(kwargs)
    return describe(grid(bound))


@contextlib.contextmanager
def _recorded(events: list):
    """Triton's run() wrapped (launches into `events`), the aten log on, the launcher's cached paths off,
    and on a GPU Triton's launch hook counting every launch; yields the hook's count (a list)."""
    count = [0]
    log = _AtenLog(events)
    patched = []
    for cls in triton_classes():
        orig = cls.run

        def run(fn_self, *args, grid=None, warmup=False, __orig=orig, **kwargs):
            if not warmup:
                events.append(["triton", identity(fn_self), _grid(fn_self, grid, args, kwargs),
                               describe(list(args)), describe(kwargs)])
            log.inside_triton += 1
            try:
                return __orig(fn_self, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                log.inside_triton -= 1

        patched.append((cls, orig))
        cls.run = run
    hooks = None
    if torch.cuda.is_available():
        try:
            from triton import knobs

            hooks = knobs.runtime.launch_enter_hook
        except Exception:
            hooks = None

    def counted(*_a, **_k):
        count[0] += 1

    if hooks is not None:
        hooks.add(counted)
    launcher.PLAIN[0] = True
    try:
        with log:
            yield count
    finally:
        launcher.PLAIN[0] = False
        if hooks is not None:
            hooks.remove(counted)
        for cls, orig in patched:
            cls.run = orig


def digest(fn: Callable, args: tuple, cuda: bool) -> str | None:
    """The program one call of `fn(*args)` runs (see the module's note), or None when it cannot be named.
    Call it once before, so that what is compiled or autotuned on a first call is done."""
    events: list = []
    with _recorded(events) as count:
        fn(*args)
        if cuda:
            torch.cuda.synchronize()
    launches = sum(1 for e in events if e[0] == "triton")
    if launches == 0 or (cuda and count[0] != launches):
        return None
    return hashlib.sha256(json.dumps(events, default=str).encode()).hexdigest()[:32]


def digests(fn: Callable, make_args: Callable[[dict], tuple], shapes: list[dict], cuda: bool,
            stop: Callable[[int, str | None], bool] | None = None,
            verify: Callable[[], None] | None = None) -> list[dict]:
    """[{"shape": shape, "program": digest or None}] for each shape in order, after one warm call
    each; `stop(index, digest)` True ends the list after that shape (the screen stops at the first
    that differs from the best's). `verify` (the judge's integrity check) runs after every shape."""
    out = []
    for i, shape in enumerate(shapes):
        args = make_args(shape)
        fn(*args)
        if verify is not None:
            verify()
        d = digest(fn, args, cuda)
        if verify is not None:
            verify()
        out.append({"shape": shape, "program": d})
        if stop is not None and stop(i, d):
            break
    return out


def at_shapes(fn: Callable, spec, shapes: list[dict], dt: str, device: str, cuda: bool,
              verify: Callable[[], None], best: list[str | None] | None = None) -> dict:
    """The worker's step: {"programs": [{"shape", "program"}], "same_program": bool (only with
    `best`, the best version's digests at the same shapes: True when every one is equal and
    named)}, plus "programs_error" when naming failed. With `best`, it stops at the first shape
    that differs (the screen: the other shapes would only cost compiles). A failure here is never
    the candidate's verdict; a changed judge (verify) still is."""
    from autokernel.bench.checks import make_inputs
    from autokernel.bench.judge import Tampered
    from autokernel.kernels.spec import to_dtype

    out: dict = {"programs": []}
    stop = None
    if best is not None:
        def stop(i: int, d: str | None) -> bool:
            return d is None or i >= len(best) or d != best[i]
    try:
        rows = digests(fn, lambda s: make_inputs(spec, s, to_dtype(dt), device, 7), shapes, cuda,
                       stop=stop, verify=verify)
        out["programs"] = rows
    except Tampered:
        raise
    except Exception as exc:
        out["programs_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if best is not None:
        rows = out["programs"]
        out["same_program"] = (len(rows) == len(shapes) == len(best)
                               and all(r["program"] and r["program"] == b for r, b in zip(rows, best)))
    return out
