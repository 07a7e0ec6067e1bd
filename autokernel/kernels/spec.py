"""The contract every kernel type fulfils: reference, cost model, inputs, tolerances, shapes.

A spec is fixed and lives outside the editable kernel file, so a proposer cannot change how its
candidate is judged. Shapes are plain dicts of named ints (e.g. {"rows": 4096, "cols": 32000}) so
they can be stored as JSON and passed between processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

Shape = dict[str, int]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "fp16": "float16", "half": "float16", "f16": "float16",
                 "bf16": "bfloat16", "float": "float32"}


def dtype_name(dtype: torch.dtype | str) -> str:
    if isinstance(dtype, str):
        name = DTYPE_ALIASES.get(dtype, dtype)
        if name not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
        return name
    for name, d in DTYPES.items():
        if d == dtype:
            return name
    raise ValueError(f"unsupported dtype {dtype}")


def to_dtype(dtype: torch.dtype | str) -> torch.dtype:
    return DTYPES[dtype_name(dtype)]


# Default tolerances (atol, rtol) per dtype; a spec may override per its op's numerics.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}


@dataclass
class KernelSpec:
    """Everything fixed about one kernel type.

    make_inputs(shape, dtype, device, generator, scale) -> tuple of positional args for both the
        reference and the kernel entry point. `scale` is "normal" or one of `adversarial` labels.
    reference(*args) -> torch.Tensor computed as models compute it (upcast inside when the op
        does so in practice); the bench compares against it evaluated in float64 where the
        spec allows (`reference_upcast`).
    flops(shape, dtype) / bytes(shape, dtype): the minimum work and traffic (each input read once,
        each output written once).
    """

    name: str
    description: str
    shape_keys: tuple[str, ...]
    make_inputs: Callable[..., tuple]
    reference: Callable[..., torch.Tensor]
    flops: Callable[[Shape, torch.dtype], float]
    bytes: Callable[[Shape, torch.dtype], float]
    default_shapes: list[Shape]  # includes LLaMA-7B's shapes; the benchmark and GPU tests use these
    small_shapes: list[Shape]  # quick, interpreter-friendly shapes used on the CPU and in smoke tests
    edge_shapes: list[Shape]  # non powers of two, size 1 dims
    shape_of: Callable[..., Shape] = None  # type: ignore[assignment]  # set by every type
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    tolerances: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    adversarial: tuple[str, ...] = ("large", "tiny", "equal")  # scales make_inputs understands
    compute_bound: bool = False  # roofline against the matmul ceiling rather than bandwidth
    # Its kernels multiply with tl.dot: under the Triton interpreter tl.dot on bf16 operands is
    # wrong (numpy has no bf16), so the bench sweeps such a type in fp32/fp16 there.
    uses_dot: bool = False
    # Substrings of GPU kernel names of the library op this type replaces; a candidate that
    # launches only these is rejected as not launching its own kernel.
    library_kernel_patterns: tuple[str, ...] = ()
    # Which args are tensors the kernel may legitimately be given non-contiguous (edge stage).
    noncontiguous_args: tuple[int, ...] = (0,)
    reference_upcast: bool = True  # compare against the reference evaluated in float64 inputs
    # Looser (atol, rtol) per adversarial scale and dtype, where that scale makes even an exact-
    # in-its-dtype computation err more (errors proportional to the magnitudes involved).
    scale_tolerances: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)

    def tolerance(self, dtype: torch.dtype | str, scale: str = "normal") -> tuple[float, float]:
        name = dtype_name(dtype)
        return self.scale_tolerances.get(scale, {}).get(name, self.tolerances[name])

    def call_key(self, args: tuple) -> tuple[str, str]:
        """(shape label, dtype name) of a call: the key of per-shape dispatch decisions."""
        t = next(a for a in args if isinstance(a, torch.Tensor))
        return self.shape_label(self.shape_of(*args)), dtype_name(t.dtype)

    def shape_label(self, shape: Shape) -> str:
        return "x".join(f"{shape[k]}" for k in self.shape_keys)

    def parse_shape(self, text: str) -> Shape:
        """'4096x32000' or 'rows=4096,cols=32000' -> a shape dict for this type."""
        text = text.strip()
        if "=" in text:
            parts = dict(p.split("=", 1) for p in text.replace(" ", "").split(","))
            shape = {k: int(v) for k, v in parts.items()}
        else:
            values = [int(v) for v in text.lower().replace(",", "x").split("x") if v]
            if len(values) != len(self.shape_keys):
                raise ValueError(f"{self.name} shapes have {len(self.shape_keys)} dims "
                                 f"({'x'.join(self.shape_keys)}), got {text!r}")
            shape = dict(zip(self.shape_keys, values))
        missing = set(self.shape_keys) - set(shape)
        if missing:
            raise ValueError(f"{self.name} shape is missing {', '.join(sorted(missing))}")
        return {k: shape[k] for k in self.shape_keys}


def randn(shape: Sequence[int], dtype: torch.dtype, device: Any, gen: torch.Generator | None,
          scale: str = "normal") -> torch.Tensor:
    """Random tensor drawn in fp32 on the generator's device and cast; `scale` picks adversarial
    ranges shared by most specs."""
    t = torch.randn(*shape, generator=gen, device=gen.device if gen is not None else device, dtype=torch.float32)
    if scale == "large":
        t = t * (1e3 if dtype == torch.float16 else 1e4)  # stays finite in fp16 (max 65504)
    elif scale == "tiny":
        t = t * 1e-6
    elif scale == "equal":
        t = torch.full_like(t, 0.5)
    return t.to(device=device, dtype=dtype)
