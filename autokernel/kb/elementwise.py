"""The elementwise ops by name, and the rules that map a traced elementwise op to one.

EW_OPS is the named table of the generic elementwise kernel's ops (templates/elementwise.py):
each op's name (EW.<NAME> in the generated code), its code (the kernel's OP), its Triton
expression over {x}, {y}, {a} (alpha) and {b} (beta), read from the kernel's own branches so that
the generic kernel and the generated fused ones compute each op the same way, and its swap
partner (x OP y == y SWAP x). ElementwiseRules maps fx nodes (modules, functions, methods) to
`_kb_ew(EW.<NAME>, ...)` calls; a rule returns None when the call has arguments it does not cover.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from importlib import resources

from autokernel.kb.fx_nodes import is_float_tensor, is_number, is_scalar_node
from autokernel.kb.rule_base import Rules
from autokernel.kb.templates.elementwise import _KB_SWAP, EW


@dataclass(frozen=True)
class EwOp:
    name: str  # EW.<name> in the generated code
    code: int  # _kb_ew_kernel's OP
    expr: str  # the Triton expression over {x}, {y}, {a}, {b}
    swap: int | None  # the op with x and y swapped, where there is one

    @property
    def arity(self) -> int:
        return 2 if "{y}" in self.expr else 1


def _kernel_exprs() -> dict[int, str]:
    """code -> expression, from the `if OP == code: r = ...` branches of _kb_ew_kernel (its last
    `else` is the one op no branch names)."""
    src = (resources.files("autokernel.kb.templates") / "elementwise.py").read_text()
    kernel = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "_kb_ew_kernel")
    branch = next(n for n in kernel.body if isinstance(n, ast.If) and ast.unparse(n.test).startswith("OP =="))
    exprs = {}
    while isinstance(branch, ast.If):
        exprs[branch.test.comparators[0].value] = ast.get_source_segment(src, branch.body[0].value)
        branch = branch.orelse[0] if isinstance(branch.orelse[0], ast.If) else branch.orelse
    (rest,) = {v for k, v in vars(EW).items() if k.isupper()} - set(exprs)
    exprs[rest] = ast.get_source_segment(src, branch[0].value)
    names = {"x": "{x}", "y": "{y}", "alpha": "{a}", "beta": "{b}"}
    return {code: re.sub(r"\b(x|y|alpha|beta)\b", lambda m: names[m[1]], e) for code, e in exprs.items()}


_EXPRS = _kernel_exprs()
EW_OPS = {code: EwOp(name, code, _EXPRS[code], _KB_SWAP.get(code)) for name, code in vars(EW).items() if name.isupper()}

# torch's names of the ops that take x alone: functions and methods (gelu has its approximate=),
# modules (those with inplace= only where x may be written anew, see out_of_place_ok)
_UNARY_FNS = {n: getattr(EW, n.upper()) for n in ("relu", "sigmoid", "tanh", "silu", "exp", "neg", "abs", "rsqrt",
                                                   "sqrt", "log", "mish", "hardswish", "selu", "hardsigmoid")}
_INPLACE_ARG = {"relu", "mish", "hardswish", "selu", "hardsigmoid"}  # F. functions with inplace=
_UNARY_MODULES = {"ReLU": EW.RELU, "Sigmoid": EW.SIGMOID, "Tanh": EW.TANH, "SiLU": EW.SILU}
_UNARY_INPLACE_MODULES = {"Mish": EW.MISH, "Hardswish": EW.HARDSWISH, "SELU": EW.SELU, "Hardsigmoid": EW.HARDSIGMOID}
_BINARY = {"add": EW.ADD, "sub": EW.SUB, "mul": EW.MUL, "truediv": EW.DIV, "div": EW.DIV}


class ElementwiseRules(Rules):
    """Sets self.last_ew to (op, x, y, alpha, beta) for an elementwise replacement, which fusion reads."""

    def ew_call(self, op: int, x, y=None, alpha=0.0, beta=0.0, text: str = "") -> str:
        """_kb_ew(EW.<op>, x[, y, alpha, beta]); `text` the arguments after x as written."""
        self.last_ew = (op, x, y, alpha, beta)
        return f"_kb_ew(EW.{EW_OPS[op].name}, {self.fmt(x)}{text})"

    def ew_unary(self, op: int, x, alpha=0.0, beta=0.0) -> str | None:
        if not is_float_tensor(x):
            return None
        extra = f", None, {float(alpha)!r}, {float(beta)!r}" if (alpha or beta) else ""
        return self.ew_call(op, x, None, float(alpha), float(beta), extra)

    def ew_binary(self, op: int, a, b) -> str | None:
        if is_float_tensor(a) and is_float_tensor(b):
            return self.ew_call(op, a, b, text=f", {self.fmt(b)}")
        if is_float_tensor(a) and is_number(b):
            return self.ew_call(op, a, None, float(b), text=f", None, {float(b)!r}")
        if is_number(a) and is_float_tensor(b):
            return self.ew_call(EW_OPS[op].swap, b, None, float(a), text=f", None, {float(a)!r}")
        if is_float_tensor(a) and is_scalar_node(b):
            return self.ew_call(op, a, None, b, text=f", None, float({self.fmt(b)})")
        if is_scalar_node(a) and is_float_tensor(b):
            return self.ew_call(EW_OPS[op].swap, b, None, a, text=f", None, float({self.fmt(a)})")
        return None

    @staticmethod
    def out_of_place_ok(mod, x) -> bool:
        """An activation module may write a new tensor instead of x in place: it is not in place, or
        x is an intermediate result nothing else reads (ReLU6(inplace=True) in MobileNet)."""
        return not mod.inplace or (hasattr(x, "users") and len(x.users) == 1 and x.op not in ("placeholder", "get_attr"))

    def ew_module(self, mod, x) -> str | None:
        """An activation module's call."""
        kind = type(mod).__name__ if type(mod).__module__.startswith("torch.nn") else None
        if kind in _UNARY_MODULES:
            return self.ew_unary(_UNARY_MODULES[kind], x)
        if kind == "GELU":
            return self.ew_unary(EW.GELU_TANH if mod.approximate == "tanh" else EW.GELU, x)
        if kind == "Softplus":
            return self.ew_unary(EW.SOFTPLUS, x, float(mod.beta), float(mod.threshold))
        if kind is None or not hasattr(mod, "inplace") or not self.out_of_place_ok(mod, x):
            return None
        if kind in _UNARY_INPLACE_MODULES:
            return self.ew_unary(_UNARY_INPLACE_MODULES[kind], x)
        if kind == "LeakyReLU":
            return self.ew_unary(EW.LEAKY_RELU, x, float(mod.negative_slope))
        if kind in ("Hardtanh", "ReLU6"):
            return self.ew_unary(EW.CLAMP, x, float(mod.min_val), float(mod.max_val))
        if kind == "ELU":
            return self.ew_unary(EW.ELU, x, float(mod.alpha))
        return None

    def ew_function(self, node, name: str, x, rest: list, kw2: dict) -> str | None:
        """A function or method call `name(x, *rest, **kw2)` (kw2 without input=)."""
        if name in ("gelu",):
            approx = kw2.get("approximate", "none")
            if rest or set(kw2) - {"approximate"}:
                return None
            return self.ew_unary(EW.GELU_TANH if approx == "tanh" else EW.GELU, x)
        if name in _UNARY_FNS:
            # F.relu / F.mish / F.hardswish take inplace=; writing x in place is not reproduced
            if node.op == "call_function" and name in _INPLACE_ARG:
                allk = dict(zip(("inplace",), rest), **kw2)
                if set(allk) - {"inplace"} or allk.get("inplace") or len(rest) > 1:
                    return None
            elif rest or kw2:
                return None
            return self.ew_unary(_UNARY_FNS[name], x)
        if name == "softplus":
            allk = dict(zip(("beta", "threshold"), rest), **kw2)
            beta, threshold = allk.get("beta", 1.0), allk.get("threshold", 20.0)
            if set(allk) <= {"beta", "threshold"} and is_number(beta) and beta and is_number(threshold):
                return self.ew_unary(EW.SOFTPLUS, x, float(beta), float(threshold))
            return None
        if name == "smooth_l1_loss":  # reduction="none" (rewrites.py splits the reduced ones)
            allk = dict(zip(("target", "size_average", "reduce", "reduction", "beta"), rest), **kw2)
            t, beta = allk.get("target"), allk.get("beta", 1.0)
            if set(allk) <= {"target", "size_average", "reduce", "reduction", "beta"} \
                    and allk.get("reduction") == "none" and allk.get("size_average") is None \
                    and allk.get("reduce") is None and is_number(beta) and beta >= 0 and is_float_tensor(x) \
                    and is_float_tensor(t) and x.meta["tensor_meta"].shape == t.meta["tensor_meta"].shape:
                return self.ew_call(EW.SMOOTH_L1, x, t, float(beta), text=f", {self.fmt(t)}, {float(beta)!r}")
            return None
        if name == "elu":
            allk = dict(zip(("alpha", "inplace"), rest), **kw2)
            if set(allk) <= {"alpha", "inplace"} and not allk.get("inplace") and is_number(allk.get("alpha", 1.0)):
                return self.ew_unary(EW.ELU, x, float(allk.get("alpha", 1.0)))
            return None
        if name in ("pow",) and rest == [2] and not kw2 or name == "square" and not rest and not kw2:
            return self.ew_unary(EW.SQUARE, x)
        if name == "pow" and rest == [3] and not kw2:  # MinGPT's GELU (L1 88) cubes x
            return self.ew_unary(EW.CUBE, x)
        if name == "xlogy" and len(rest) == 1 and not kw2 and is_float_tensor(x) and is_float_tensor(rest[0]):
            return self.ew_call(EW.XLOGY, x, rest[0], text=f", {self.fmt(rest[0])}")
        if name == "leaky_relu":
            allk = dict(zip(("negative_slope", "inplace"), rest), **kw2)
            if set(allk) <= {"negative_slope", "inplace"} and not allk.get("inplace") \
                    and is_number(allk.get("negative_slope", 0.01)):
                return self.ew_unary(EW.LEAKY_RELU, x, float(allk.get("negative_slope", 0.01)))
            return None
        if name in ("hardtanh", "clamp", "relu6"):
            keys = ("min_val", "max_val", "inplace") if name == "hardtanh" else ("min", "max")
            allk = dict(zip(keys, rest), **kw2)
            lo = allk.get(keys[0], -1.0 if name == "hardtanh" else None)
            hi = allk.get(keys[1], 1.0 if name == "hardtanh" else None)
            if name == "relu6":
                lo, hi = 0.0, 6.0
                allk.pop("inplace", None)
            if not set(allk) <= set(keys) or allk.get("inplace"):
                return None
            if is_number(lo) and is_number(hi):
                return self.ew_unary(EW.CLAMP, x, float(lo), float(hi))
            # one bound (the hinge loss's clamp(min=0)): a max or min with a scalar; an infinite
            # other bound would not fuse (the fused kernels take finite constants only)
            if name == "clamp" and (lo is None) != (hi is None) and is_number(lo if hi is None else hi):
                return self.ew_unary(EW.MAXIMUM if hi is None else EW.MINIMUM, x, float(lo if hi is None else hi))
            return None
        if name in _BINARY and len(rest) == 1 and not kw2:
            return self.ew_binary(_BINARY[name], x, rest[0])
        return None
