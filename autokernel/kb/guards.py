"""What the KernelBench judge watches while ModelNew runs: whether it runs the problem's Model, and
which dtypes its own kernels receive.

ReferenceGuard: a ModelNew that subclasses the problem's Model and keeps its forward, calls
super().forward(), Model.forward(self, ...), or builds a Model and calls it (reached through
sys.modules or gc, or a copy of the problem's code in the solution file) computes the answer with
the reference itself. A profile hook sees every Python function that starts during the call and
compares its code with the problem's Model methods (all but __init__: building the same weights
through Model's constructor is how a solution gets them) by their instructions, so an identical
copy from another file matches too. Each code object is looked at once. The hook is off while the
interpreter runs a Triton kernel (launches.record_triton), so the interpreter's own Python costs
nothing; switching it off from the candidate is itself refused.

DtypeSpy: under fp32 tolerance, half-precision tensors handed to the solution's own kernels are a
precision downcast.
"""

from __future__ import annotations

import dis
import sys
import threading
import types


def fingerprint(code: types.CodeType) -> tuple:
    """A code object's instructions with their resolved arguments (docstrings and line numbers
    left out): equal for the same function compiled from another file."""
    out = []
    for ins in dis.get_instructions(code):
        arg = ins.argval
        if isinstance(arg, types.CodeType):
            arg = fingerprint(arg)
        elif ins.opname == "LOAD_CONST" and isinstance(arg, str):
            arg = "<str>"
        elif ins.opname in ("RESUME", "NOP", "CACHE"):
            continue
        out.append((ins.opname, arg if isinstance(arg, (int, float, str, bool, tuple, type(None))) else repr(arg)))
    return tuple(out)


def model_methods(model_cls: type) -> dict[tuple, str]:
    """Fingerprints of the methods the class itself defines, but __init__ -> their names."""
    found = {}
    for name, value in vars(model_cls).items():
        fn = getattr(value, "__func__", value)
        if name != "__init__" and isinstance(fn, types.FunctionType):
            found[fingerprint(fn.__code__)] = f"{model_cls.__name__}.{name}"
    return found


class ReferenceGuard:
    """`with guard:` around a call of ModelNew; `guard.reason()` after it."""

    def __init__(self, model_cls: type):
        self.methods = model_methods(model_cls)
        self.seen: dict[types.CodeType, str | None] = {}
        self.hits: list[str] = []
        self.switched_off = False
        self.hook = self._hook  # one bound method, so that sys.getprofile() can be compared with it

    def _hook(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        hit = self.seen.get(code, 0)
        if hit == 0:
            hit = self.seen[code] = self.methods.get(fingerprint(code)) if code.co_name != "<module>" else None
        if hit and hit not in self.hits:
            self.hits.append(hit)

    def __enter__(self):
        if self.methods:
            threading.setprofile(self.hook)
            sys.setprofile(self.hook)
        return self

    def __exit__(self, *exc):
        if self.methods:
            self.switched_off = sys.getprofile() is not self.hook
            sys.setprofile(None)
            threading.setprofile(None)
        return False

    def reason(self) -> str | None:
        if self.hits:
            return (f"ModelNew runs the code of the problem's {', '.join(self.hits)} (inherited, through super(), "
                    "or on a Model it built): the reference is not a solution")
        if self.switched_off:
            return "ModelNew switched off the judge's profile hook (sys.setprofile) while it ran"
        return None


class DtypeSpy:
    """Records the dtypes of tensors handed to Triton functions defined in the solution file."""

    def __init__(self, module_name: str):
        self.module_name = module_name
        self.dtypes: set = set()
        self.patched: list = []

    def __enter__(self):
        import torch

        from autokernel.bench.launches import triton_classes

        for cls in triton_classes():
            orig = cls.run

            def run(this, *args, __orig=orig, **kwargs):
                fn = getattr(this, "fn", None)
                if getattr(fn, "__module__", None) == self.module_name:
                    for a in list(args) + list(kwargs.values()):
                        if isinstance(a, torch.Tensor):
                            self.dtypes.add(a.dtype)
                return __orig(this, *args, **kwargs)

            self.patched.append((cls, orig))
            cls.run = run
        return self

    def __exit__(self, *exc):
        for cls, orig in self.patched:
            cls.run = orig
