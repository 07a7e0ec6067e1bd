"""The kernel types: one module per type holding its spec; starting kernels live beside them.

Kernels never import the store or the CLI.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from autokernel.kernels.spec import KernelSpec

KERNEL_TYPES: tuple[str, ...] = (
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
BACKENDS: tuple[str, ...] = ("triton", "cuda")

_PKG = Path(__file__).resolve().parent


def get_spec(kernel_type: str) -> KernelSpec:
    if kernel_type not in KERNEL_TYPES:
        raise KeyError(f"unknown kernel type {kernel_type!r}; known: {', '.join(KERNEL_TYPES)}")
    return importlib.import_module(f"autokernel.kernels.{kernel_type}").SPEC


def starter_path(kernel_type: str, backend: str = "triton") -> Path:
    """The starting kernel file of a type: Triton under kernels/starters, CUDA C++ under cuda/starters."""
    if kernel_type not in KERNEL_TYPES:
        raise KeyError(f"unknown kernel type {kernel_type!r}; known: {', '.join(KERNEL_TYPES)}")
    if backend == "triton":
        return _PKG / "starters" / f"{kernel_type}.py"
    if backend == "cuda":
        return _PKG.parent / "cuda" / "starters" / f"{kernel_type}.py"
    raise KeyError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
