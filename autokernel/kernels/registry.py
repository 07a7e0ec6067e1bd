"""The kernel types, one line each. Everything else about a type lives in its own folder.

A type is a package (autokernel/kernels/<type>/ for the built-in ones) holding:
- __init__.py: its spec (SPEC: reference, cost model, inputs, tolerances, shapes),
- triton_starter.py: the Triton starting kernel, a self-contained kernel file (copied out as the
  loop's first candidate and run in the judge's sandbox, so it imports nothing of its folder),
- cuda_starter.py: the CUDA C++ starting kernel, where the type has one,
- hooks.py: HOOKS, an autokernel.kernels.hooks.Hooks: how profile recognises the op in a model and
  reads its shapes, and how plug (and autokernel.apply) route it to a kernel,
- notes.md: what the LLM proposer is told about the type (optional),
- kb_rules.py and kb_helper.py, where the KB compiler can give a problem's main op the type's
  starter (optional): RULE, an autokernel.kb.rule_base.LibraryRule (the traced calls that are the
  op and the helper call each becomes), and the helpers' template (kb_helper._kb_* functions that
  adapt those calls to the starter's entry, copied into the solution file with the starter).
The search space is the starter's own SEARCH_SPACE; the custom op's schema is the reference's
signature (autokernel.ops). Adding a type is its folder plus one line in BUILTIN.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autokernel.kb.rule_base import LibraryRule
    from autokernel.kernels.hooks import Hooks
    from autokernel.kernels.spec import KernelSpec

BUILTIN: tuple[str, ...] = (
    "matmul",
    "softmax",
    "layernorm",
    "rmsnorm",
    "flash_attention",
    "fused_mlp",
    "cross_entropy",
    "rotary_embedding",
    "reduce",
)
BACKENDS: dict[str, str] = {"triton": "triton_starter.py", "cuda": "cuda_starter.py"}

# type -> the package holding it; built-in types live beside this module
_packages: dict[str, str] = {t: f"{__package__}.{t}" for t in BUILTIN}


def kernel_types() -> tuple[str, ...]:
    """Every registered type, the built-in ones first, in registration order."""
    return tuple(_packages)


def register(kernel_type: str, package: str) -> None:
    """Add a type kept outside autokernel (its package as above, importable by name)."""
    if not kernel_type.isidentifier():
        raise ValueError(f"a kernel type is an identifier, not {kernel_type!r}")
    if kernel_type in BUILTIN:
        raise ValueError(f"{kernel_type!r} is a built-in kernel type")
    _packages[kernel_type] = package


def unregister(kernel_type: str) -> None:
    if kernel_type in BUILTIN:
        raise ValueError(f"{kernel_type!r} is a built-in kernel type")
    _packages.pop(kernel_type, None)


def _known(kernel_type: str) -> str:
    package = _packages.get(kernel_type)
    if package is None:
        raise KeyError(f"unknown kernel type {kernel_type!r}; known: {', '.join(_packages)}")
    return package


def package(kernel_type: str) -> ModuleType:
    return importlib.import_module(_known(kernel_type))


def folder(kernel_type: str) -> Path:
    return Path(package(kernel_type).__file__).resolve().parent


def spec(kernel_type: str) -> "KernelSpec":
    return package(kernel_type).SPEC


def hooks(kernel_type: str) -> "Hooks":
    return importlib.import_module(f"{_known(kernel_type)}.hooks").HOOKS


def kb_rule(kernel_type: str) -> "LibraryRule | None":
    """The type's KB compiler rule (kb_rules.RULE), or None for a type without one."""
    name = f"{_known(kernel_type)}.kb_rules"
    return importlib.import_module(name).RULE if importlib.util.find_spec(name) else None


def kb_helper_path(kernel_type: str, module: str = "kb_helper") -> Path:
    """A helper template of the type's folder (kb_helper.py, or another the type's rule asks for)."""
    return folder(kernel_type) / f"{module}.py"


def starter_path(kernel_type: str, backend: str = "triton") -> Path:
    """The starting kernel file of a type for a backend (it may not exist: a type without a CUDA
    starter; callers that need one check)."""
    where = folder(kernel_type)
    if backend not in BACKENDS:
        raise KeyError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    return where / BACKENDS[backend]


def notes(kernel_type: str) -> str:
    """The type's notes.md for the LLM proposer ("" without one)."""
    path = folder(kernel_type) / "notes.md"
    return path.read_text().strip() if path.exists() else ""
