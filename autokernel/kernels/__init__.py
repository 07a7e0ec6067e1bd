"""The kernel types: one folder per type (spec, starters, hooks), listed in kernels/registry.py.

Kernels never import the store or the CLI.
"""

from __future__ import annotations

from pathlib import Path

from autokernel.kernels import registry
from autokernel.kernels.spec import KernelSpec

KERNEL_TYPES: tuple[str, ...] = registry.BUILTIN  # the built-in types; kernel_types() adds registered ones
BACKENDS: tuple[str, ...] = tuple(registry.BACKENDS)
kernel_types = registry.kernel_types


def get_spec(kernel_type: str) -> KernelSpec:
    return registry.spec(kernel_type)


def starter_path(kernel_type: str, backend: str = "triton") -> Path:
    """The starting kernel file of a type: <type>/triton_starter.py or <type>/cuda_starter.py."""
    return registry.starter_path(kernel_type, backend)
