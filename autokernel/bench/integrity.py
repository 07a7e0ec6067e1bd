"""What the judge trusts, snapshotted before any candidate runs and compared after every call.

Candidate code runs in the judge's process, so it can reach everything there: rebind a judge
function (checks.compare -> a no-op), rewrite a spec's reference through gc or sys.modules (its
function, the function's __code__, its tolerance table), patch a torch function both sides call
(torch.Tensor.sum), register a Python kernel for an aten op (torch.library), install a torch
function or dispatch mode, or patch torch.cuda.Event so that timings shrink. A snapshot records,
by identity, every module-level name of the judge's modules and of the modules the references and
the timing use (torch, torch.Tensor, torch.nn.functional, torch.cuda and its Event/Stream, nn
modules' methods, builtins, statistics, math, hashlib), each function's code, defaults and closure
cells, the spec objects' fields with copies of their plain data, torch.library's registered Python
kernels, the active torch modes, the C functions the GPU timing takes (between_calls.py) and the
Python threads no installed package started; `changed()` names the first thing that differs.

The check itself is the candidate's to rewrite too (Snapshot.changed given the code of `return
None`, or the saved copies edited to agree with a patch): the judges therefore check through
`checker()`, a private copy of the checking code and the records, made before the candidate is
imported and held only in the judge's locals.

Limits: a check sees what is changed when it looks, not what was changed and put back in between.
The stages check right after every call and again before making the next call's inputs (a
finalizer on an output runs when the judge lets go of it), and the GPU timing runs nothing a
candidate can rewrite between its calls (between_calls.py); what a finalizer of cyclic garbage does
when the collector happens to run inside the judge's own code, and undoes before the next check,
is not seen. Nor is one that works
through ctypes or its own native code. The reference is therefore never computed while the
candidate runs (checks.py), and the candidate has no secrets or network to gain by any of it
(sandbox.py).
"""

from __future__ import annotations

import builtins
import copy
import functools
import hashlib
import math
import operator
import statistics
import sys
import types
from types import ModuleType
from typing import Any, Callable, Iterable

_DATA = (dict, list, set, tuple)
_MISSING = object()


def _plain(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str, bytes, type(None))) or (
        isinstance(value, _DATA) and all(_plain(v) for v in (value.values() if isinstance(value, dict) else value)))


class Snapshot:
    """A list of (label, getter, expected) where the getter reads the live value."""

    def __init__(self):
        self._names: list[tuple[str, dict, str, Any]] = []  # label, namespace, key, object
        self._funcs: list[tuple[str, Any, Any, Any, Any, tuple]] = []  # label, fn, code, defaults, kwdefaults, cells
        self._data: list[tuple[str, Any, Any]] = []  # label, live container, deep copy
        self._probes: list[tuple[str, Any, Any]] = []  # label, callable, its value now
        self._keysets: list[tuple[str, Any, frozenset, bool]] = []  # label, namespace, its names, modules may join
        self._seen_funcs: set[int] = set()
        self._flat: tuple | None = None
        self._copies: list[tuple[Any, dict]] = []  # every namespace and a copy of it: the fast check

    # -- recording -----------------------------------------------------------------------------------

    def function(self, label: str, fn: Any) -> None:
        fn = getattr(fn, "__func__", fn)  # methods: their function
        if not isinstance(fn, types.FunctionType) or id(fn) in self._seen_funcs:
            return
        self._seen_funcs.add(id(fn))
        cells = tuple(c.cell_contents if _cell_full(c) else _MISSING for c in (fn.__closure__ or ()))
        self._funcs.append((label, fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__, cells))

    def namespace(self, label: str, ns: dict, *, deep: bool = True, constants_only: bool = True,
                  new_names: str = "modules") -> None:
        """Every non-dunder name of a module or class dict, by identity; functions in it with
        their code; with `deep`, classes defined there with their own dicts. Plain values are
        state when lower-case (a flag, a cache) and only UPPER_CASE ones are recorded, with a copy
        of their contents, unless `constants_only` is off (a spec's fields are all fixed).
        `new_names`: which names may appear later -- "modules" (a package gains its submodules as
        they are imported; any other new global could shadow a builtin), "none" (a class: a new
        attribute shadows an inherited method, torch.Tensor.sum over TensorBase's), or "any"."""
        if new_names != "any":
            self._keysets.append((label, ns, frozenset(ns), new_names == "modules"))
        self._copies.append((ns, dict(ns)))
        for key, value in list(ns.items()):
            if key.startswith("__") and key.endswith("__") and key not in ("__call__", "__torch_function__"):
                continue
            constant = not constants_only or key.isupper()
            if (_plain(value) or isinstance(value, _DATA)) and not constant:
                continue
            self._names.append((f"{label}.{key}", ns, key, value))
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                for part in (value.fget, value.fset):
                    self.function(f"{label}.{key}", part)
            self.function(f"{label}.{key}", value)
            if isinstance(value, _DATA) and _plain(value):
                self._data.append((f"{label}.{key}", value, copy.deepcopy(value)))
            if deep and isinstance(value, type) and value.__module__ == ns.get("__name__", None):
                self.namespace(f"{label}.{key}", vars(value), deep=False, new_names="none")

    def module(self, mod: types.ModuleType, label: str | None = None, *, deep: bool = True) -> None:
        label = label or mod.__name__
        self._names.append((f"sys.modules[{mod.__name__!r}]", sys.modules, mod.__name__, mod))
        self.namespace(label, vars(mod), deep=deep)

    def cls(self, klass: type, label: str | None = None) -> None:
        self.namespace(label or f"{klass.__module__}.{klass.__qualname__}", vars(klass), deep=False, new_names="none")

    def obj(self, label: str, obj: Any) -> None:
        """An instance's attributes (a spec: its reference, make_inputs, tolerance tables)."""
        self.namespace(label, vars(obj), deep=False, constants_only=False, new_names="none")

    def probe(self, label: str, fn) -> None:
        """A value the snapshot reads through a function (e.g. the torch.library registrations)."""
        self._probes.append((label, fn, fn()))

    # -- checking (module functions over the snapshot's state, so that checker() can copy them) ---------

    def changed(self) -> str | None:
        """The first recorded thing that is no longer as it was, or None (_changed)."""
        return _changed(vars(self))

    def __len__(self) -> int:
        return len(self._names) + len(self._funcs) + len(self._data) + len(self._probes)


def _fast(st: dict) -> tuple:
    """The recorded code objects, defaults and closure contents as parallel lists."""
    if st["_flat"] is None:
        funcs = st["_funcs"]
        cells = [(c, v) for _l, fn, *_r, vals in funcs for c, v in zip(fn.__closure__ or (), vals)
                 if v is not _MISSING]
        st["_flat"] = ([f for _l, f, *_r in funcs], [c for _l, _f, c, *_r in funcs],
                       [d for _l, _f, _c, d, *_r in funcs], [k for _l, _f, _c, _d, k, _cl in funcs],
                       [c for c, _v in cells], [v for _c, v in cells])
    return st["_flat"]


def _changed(st: dict) -> str | None:
    """The first recorded thing that is no longer as it was, or None. Checked a few thousand
    times per candidate, so the common case runs in C: each namespace compared with its copy
    (dict equality tests identity first), the code objects as lists; only when something
    differs does the slow walk name it, or find it benign (a package gained a submodule, the
    judge's own state flipped) and take a fresh copy."""
    fns, codes, defaults, kwdefaults, cells, contents = _fast(st)
    same = (all(map(_same, st["_copies"])) and list(map(_CODE, fns)) == codes
            and list(map(_DEFAULTS, fns)) == defaults and list(map(_KWDEFAULTS, fns)) == kwdefaults
            and list(map(_cell_value, cells)) == contents)
    if same and all(live == saved for _l, live, saved in st["_data"]) \
            and all(fn() == value for _l, fn, value in st["_probes"]):
        return None
    why = _explain(st)
    if why is None:  # benign: copy again what differs, so the next check is fast again
        st["_copies"] = [(ns, saved if _same((ns, saved)) else dict(ns)) for ns, saved in st["_copies"]]
    return why


def _explain(st: dict) -> str | None:
    """The slow walk, once something differs: what it is (or None for a benign difference)."""
    names = st["_names"]
    for i, (label, ns, key, value) in enumerate(names):
        now = ns.get(key, _MISSING)
        if now is not value:
            if not _dynamo_wrapper(now, value):
                return label
            names[i] = (label, ns, key, now)  # the wrapper is what stays there
            st["_flat"] = None
    for label, fn, code, defaults, kwdefaults, cells in st["_funcs"]:
        if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults:
            return f"{label} (its code)"
        for c, v in zip(fn.__closure__ or (), cells):
            if (c.cell_contents if _cell_full(c) else _MISSING) is not v:
                return f"{label} (a closure variable)"
    keysets = st["_keysets"]
    for i, (label, ns, known, modules_ok) in enumerate(keysets):
        if len(ns) != len(known):  # same size: any new name took a recorded one's place, seen above
            # __warningregistry__: the warnings machinery's record in the module a warning was
            # attributed to (a problem's Model.__init__ building nn.TransformerEncoder, L3 28)
            new = ns.keys() - known
            adopted = [k for k in new if dynamo_global(k, ns[k])]
            extra = [k for k in new - set(adopted)
                     if not (modules_ok and isinstance(ns[k], ModuleType) and not k.startswith("__"))
                     and k != "__warningregistry__"]
            if extra:
                return f"{label} (a new attribute {sorted(extra)[0]!r})"
            # Dynamo's globals are adopted as they first appear: rebinding one later (its compiled
            # code reads it: a compiled baseline made slow) is then a change like any other
            names += [(f"{label}.{k}", ns, k, ns[k]) for k in adopted]
            keysets[i] = (label, ns, known | frozenset(adopted), modules_ok)
    for label, live, saved in st["_data"]:
        if live != saved:
            return f"{label} (its contents)"
    for label, fn, value in st["_probes"]:
        if fn() != value:
            return label
    return None


def checker(snap: Snapshot) -> Callable[[], str | None]:
    """A check of `snap` that no candidate can reach or rewrite. The judge's modules are the
    candidate's to change: it could give Snapshot.changed (or a helper it calls) the code of
    `return None`, or edit the snapshot's saved copies to agree with what it patched, and every
    later check would pass. So this takes, before the candidate is imported, private copies of the
    checking functions (between_calls.private: their code over copies of their globals and the
    builtins), of the probes, and of the snapshot's records, and returns a function the judge holds
    only in its own locals: what the candidate changes in the modules, the Snapshot class or the
    public snapshot changes nothing for it, and whatever it leaves changed, it reports."""
    from autokernel.bench.between_calls import private

    import torch

    st = vars(snap)
    # the genuine wrapper code, made now (the public cache is a list a candidate could fill)
    dynamo = [torch._disable_dynamo(lambda: None).__code__]
    check, *_ = private(_changed, _fast, _explain, _same, _cell_value, _cell_full, _dynamo_wrapper, dynamo_global,
                        _dynamo_code=dynamo, ModuleType=types.ModuleType)
    probes = []
    for label, fn, _value in st["_probes"]:
        mine = private(fn, _impls_seen=[])[0] if isinstance(fn, types.FunctionType) else fn
        probes.append((label, mine, mine()))
    mine = {"_names": list(st["_names"]), "_funcs": list(st["_funcs"]), "_keysets": list(st["_keysets"]),
            "_data": [(label, live, copy.deepcopy(saved)) for label, live, saved in st["_data"]],
            "_copies": [(ns, dict(saved)) for ns, saved in st["_copies"]], "_probes": probes, "_flat": None}

    def verify() -> str | None:
        return check(mine)

    return verify


CHANGED = Snapshot.changed  # what the judges called before checker(): kept for tests and tools
_CODE, _DEFAULTS, _KWDEFAULTS = (operator.attrgetter(a) for a in ("__code__", "__defaults__", "__kwdefaults__"))


def _same(pair) -> bool:
    ns, saved = pair
    try:
        return ns == saved
    except Exception:  # a value whose == misbehaves (it changed: the slow walk says what)
        return False


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return _MISSING


_dynamo_code: list = []


def dynamo_global(name: str, value) -> bool:
    """Whether a new global of a module is one Dynamo installs while compiling a function of it (the
    judge's torch.compile baseline of the problem's Model): what its transformed code reads,
    __compiled_fn_N_<uuid>, __resume_at_..., __builtins_dict___N, __import_<module>, ... Such names
    start with "__" and do not end with it: a dunder (__getattr__) would change the module, and none
    of them can shadow a builtin. The builtins dict and imported modules are checked by value, since
    Dynamo reuses such a name when it is already there (a planted fake module would be read)."""
    if not name.startswith("__") or name.endswith("__"):
        return False
    if name.startswith("__builtins_dict__"):
        return value is builtins.__dict__
    if name.startswith("__import_"):
        return value is sys.modules.get(name[len("__import_"):].replace("_dot_", "."))
    return True


def _dynamo_wrapper(now: Any, was: Any) -> bool:
    """Importing torch._dynamo (transformers does) rebinds torch.manual_seed to
    torch._disable_dynamo(torch.manual_seed): that wrapper of the same function is no change."""
    if not _dynamo_code:
        import torch

        _dynamo_code.append(torch._disable_dynamo(lambda: None).__code__)
    return getattr(now, "__wrapped__", None) is was and getattr(now, "__code__", None) is _dynamo_code[0]


def _cell_full(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


_impls_seen: list = []  # [the whole registration set last seen, its aten part]


def _library_impls():
    """Python kernels registered for aten ops (a Meta kernel computes shapes only; torch's own
    imports register kernels for other namespaces). The filtered set is recomputed only when the
    registrations changed at all."""
    import torch.library

    impls = getattr(torch.library, "_impls", set())
    if not _impls_seen or impls != _impls_seen[0]:
        _impls_seen[:] = [frozenset(impls), frozenset(k for k in impls if k.startswith("aten/")
                                                      and not k.endswith("/Meta"))]
    return _impls_seen[1]


def _modes():
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return torch._C._len_torch_function_stack(), len(_get_current_dispatch_mode_stack())


def live_threads(roots: tuple[str, ...]) -> int:
    """Live Python threads that neither the judge nor an installed package started: what a candidate
    left running beside the judge (its code would run between the judge's checks). A thread counts
    as theirs by the code it runs: its target's (a Timer's function's, a subclass's run) file under
    `roots` (introspection.trusted_roots). Threads started with _thread itself, out of threading's
    sight, count too."""
    import _thread
    import threading

    main = threading.main_thread()
    seen = [t for t in threading.enumerate() if t is not main and not isinstance(t, threading._DummyThread)]
    alien = max(0, _thread._count() - len(seen))
    for t in seen:
        fn = getattr(t, "_target", None) or getattr(t, "function", None) or type(t).run
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        if code is None or not code.co_filename.startswith(roots):
            alien += 1
    return alien


def _torch_parts() -> Iterable[tuple[str, Any]]:
    import torch
    import torch.nn.functional as F

    yield "torch", torch
    yield "torch.nn.functional", F
    for name in ("linalg", "fft", "special", "cuda", "profiler", "autograd", "random"):
        sub = getattr(torch, name, None)
        if isinstance(sub, types.ModuleType):
            yield f"torch.{name}", sub


def outside_a_call() -> str | None:
    """The anti-cheat's own state must be at rest between calls: counting not paused, no launch
    in progress (a candidate that set these would hide its library work)."""
    from autokernel.bench import introspection, launches, share

    if share._pause[0] or launches._live_ranges or launches._meters:
        return "the anti-cheat's launch records"
    return introspection.refused()


def judge_snapshot(extra_modules: Iterable[types.ModuleType] = (), specs: Iterable[Any] = ()) -> Snapshot:
    """The snapshot every judge takes before it imports a candidate: its own modules (every loaded
    autokernel.bench / autokernel.kb / autokernel.kernels module, kernelfile), `extra_modules`,
    the spec objects, torch's namespaces, classes and timing entry points, builtins."""
    import torch
    import torch.nn as nn

    from autokernel.bench.between_calls import entry_points
    from autokernel.bench.introspection import trusted_roots

    if torch.cuda.is_available():
        # the judges torch.compile their baselines on the GPU: importing dynamo and inductor first
        # means what they rebind on import (torch.manual_seed, ...) is in the snapshot as it stays
        import torch._dynamo  # noqa: F401
        import torch._inductor.compile_fx  # noqa: F401
    snap = Snapshot()
    for name, mod in sorted(sys.modules.items()):
        if mod is not None and (name.startswith(("autokernel.bench", "autokernel.kb", "autokernel.kernels"))
                                or name in ("autokernel.kernelfile", "autokernel.errors")):
            snap.module(mod)
    for mod in extra_modules:
        snap.module(mod)
    for spec in specs:
        snap.obj(f"spec {spec.name}", spec)
    # the standard library the judges compute their verdicts with: the median and IQR of the
    # timings (statistics), the secret offsets and picks (hashlib), the precision's arithmetic
    for mod in (statistics, math, hashlib):
        snap.module(mod)
    for label, mod in _torch_parts():
        snap.module(mod, label, deep=False)
    for klass in (torch.Tensor, torch._C.TensorBase, torch.Generator, nn.Module):
        snap.cls(klass)
    for name in ("Event", "Stream", "ExternalStream"):
        klass = getattr(torch.cuda, name, None)
        if isinstance(klass, type):
            snap.cls(klass, f"torch.cuda.{name}")
    for name in dir(nn):  # the layers a KernelBench reference is built from
        klass = getattr(nn, name)
        if isinstance(klass, type) and issubclass(klass, nn.Module):
            snap.cls(klass, f"torch.nn.{name}")
    snap.namespace("builtins", vars(builtins), deep=False, new_names="any")
    snap.probe("torch.library registrations (a Python kernel for an aten op)", _library_impls)
    snap.probe("the active torch function / dispatch modes", _modes)
    snap.probe("torch._C's functions that the GPU timing calls between calls", entry_points)
    snap.probe("a thread it started, still running", functools.partial(live_threads, trusted_roots()))
    return snap
