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


# fp32 1e-4 whatever the dtype: a type whose math is fp32 end to end (16-bit inputs are exact in fp32).
FP32_MATH_TOLERANCES: dict[str, tuple[float, float]] = {name: (1e-4, 1e-4) for name in DTYPES}


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
    # Keys a shape may carry beyond shape_keys, each defaulting to another key's value (flash
    # attention's "kv_seq" to "seq"): absent, or equal to that default, a shape's label, dict and
    # meaning are what they were before the key existed; a label lists them after shape_keys.
    optional_keys: dict[str, str] = field(default_factory=dict)

    def tolerance(self, dtype: torch.dtype | str, scale: str = "normal") -> tuple[float, float]:
        name = dtype_name(dtype)
        return self.scale_tolerances.get(scale, {}).get(name, self.tolerances[name])

    def call_key(self, args: tuple) -> tuple[str, str]:
        """(shape label, dtype name) of a call: the key of per-shape dispatch decisions."""
        t = next(a for a in args if isinstance(a, torch.Tensor))
        return self.shape_label(self.shape_of(*args)), dtype_name(t.dtype)

    def shape_label(self, shape: Shape) -> str:
        shape = self.canonical_shape(shape)
        keys = self.shape_keys + (tuple(self.optional_keys) if set(self.optional_keys) & set(shape) else ())
        return "x".join(f"{self.dim(shape, k)}" for k in keys)

    def dim(self, shape: Shape, key: str) -> int:
        """shape[key], an optional key read as its default's value when the shape leaves it out."""
        return shape[key] if key in shape else shape[self.optional_keys[key]]

    def canonical_shape(self, shape: dict) -> Shape:
        """The shape's keys as ints: every shape key, and the optional ones that differ from their
        defaults (what stored shapes, labels and requests carry)."""
        out = {k: int(shape[k]) for k in self.shape_keys}
        for key, default in self.optional_keys.items():
            if key in shape and int(shape[key]) != out[default]:
                out[key] = int(shape[key])
        return out

    def parse_shape(self, text: str) -> Shape:
        """'4096x32000' or 'rows=4096,cols=32000' -> a shape dict for this type."""
        text = text.strip()
        if "=" in text:
            parts = dict(p.split("=", 1) for p in text.replace(" ", "").split(","))
            shape = {k: int(v) for k, v in parts.items()}
        else:
            values = [int(v) for v in text.lower().replace(",", "x").split("x") if v]
            keys = self.shape_keys + tuple(self.optional_keys)
            if len(values) not in (len(self.shape_keys), len(keys)):
                more = f" (or {'x'.join(keys)})" if self.optional_keys else ""
                raise ValueError(f"{self.name} shapes have {len(self.shape_keys)} dims "
                                 f"({'x'.join(self.shape_keys)}){more}, got {text!r}")
            shape = dict(zip(keys, values))
        missing = set(self.shape_keys) - set(shape)
        if missing:
            raise ValueError(f"{self.name} shape is missing {', '.join(sorted(missing))}")
        unknown = set(shape) - set(self.shape_keys) - set(self.optional_keys)
        if unknown:
            raise ValueError(f"{self.name} shapes have no {', '.join(sorted(unknown))}")
        return self.canonical_shape(shape)


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


def gen_device(gen: torch.Generator | None, device: Any) -> Any:
    """Where random inputs are drawn: the generator's device (so a seed gives the same values on
    every device), else the target device."""
    return gen.device if gen is not None else device


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def shape_maker(keys: Sequence[str]) -> Callable[..., Shape]:
    """A shape dict from positional sizes in `keys` order: shape_maker(("rows", "cols"))(4, 64)."""
    keys = tuple(keys)

    def make(*sizes: int) -> Shape:
        if len(sizes) != len(keys):
            raise ValueError(f"a shape of {'x'.join(keys)} takes {len(keys)} sizes, got {len(sizes)}")
        return dict(zip(keys, sizes))

    return make


def dims_shape_of(**where: tuple[int, int]) -> Callable[..., Shape]:
    """A spec's shape_of from where each key's size is read: key=(argument index, dim index)."""

    def shape_of(*args) -> Shape:
        return {key: args[arg].shape[dim] for key, (arg, dim) in where.items()}

    return shape_of


# Row-wise types: an op applied to every row of a 2-D (rows, cols) tensor.
ROWS_COLS = ("rows", "cols")
rows_cols = shape_maker(ROWS_COLS)
row_shape_of = dims_shape_of(rows=(0, 0), cols=(0, 1))


def rowwise_spec(**fields: Any) -> KernelSpec:
    """The KernelSpec of a row-wise type: rows x cols shapes, read off x (the first argument)."""
    return KernelSpec(shape_keys=ROWS_COLS, shape_of=row_shape_of, **fields)


def rowwise_flops(per_element: float) -> Callable[[Shape, torch.dtype], float]:
    """flops of a row-wise type that does `per_element` operations per element of x."""

    def flops(shape: Shape, dtype: torch.dtype) -> float:
        return per_element * shape["rows"] * shape["cols"]

    return flops


def rowwise_bytes(matrices: int, per_col: int = 0, per_row: int = 0) -> Callable[[Shape, torch.dtype], float]:
    """bytes of a row-wise type in its dtype: `matrices` rows x cols tensors read or written (x, the
    output), `per_col` vectors of cols (weight, bias) and `per_row` vectors of rows (a row result)."""

    def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
        rows, cols = shape["rows"], shape["cols"]
        return float((matrices * rows * cols + per_col * cols + per_row * rows) * element_size(dtype))

    return bytes_moved


def row_input(shape: Shape, dtype: torch.dtype, gdev: Any, gen: torch.Generator | None,
              scale: str = "normal") -> torch.Tensor:
    """A row-wise type's x in fp32 on `gdev`, to be cast by the caller: N(0, 1) at `scale`, with
    "large" at 1e3 rather than 1e4 in fp16 (the headroom every spec leaves below fp16's 65504)."""
    x = randn((shape["rows"], shape["cols"]), torch.float32, gdev, gen, scale)
    if scale == "large" and dtype == torch.float16:
        x = x / 10.0
    return x
