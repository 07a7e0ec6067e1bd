"""Per-shape dispatch: at each shape a model calls a kernel with, use it or leave the op to PyTorch.

A decision is keyed by (mode, shape label, dtype): mode "eager" (the model runs op by op, so the
host's launch time counts) or "compile" (torch.compile, with or without CUDA graphs: the kernel
competes with what Inductor generates for the same op). Decisions come from measurements:
- verify times the model at its workloads with and without each kernel and records, for every shape
  the kernel saw there, whether the model was faster with it (evidence "model");
- the bench's per-shape timings of the kept experiment (evidence "bench": kernel vs eager at each
  timed shape, and vs torch.compile of the reference).
Where nothing was measured at a shape the mode's default applies: in eager mode a kernel that beat
eager where it was timed (or that was never timed, e.g. a starter on a fresh machine) is used; under
torch.compile a kernel is used only where it was measured to win, because Inductor's own fused code
is a strong default and a wrong "yes" there costs more than a missed gain.

Plain data, no torch: the store keeps these rows and `apply` rebuilds the table from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

MODES = ("eager", "compile")
MIN_GAIN = 1.01  # a kernel must be at least this much faster where it was measured to be used


@dataclass(frozen=True)
class Decision:
    kernel_type: str
    mode: str  # eager | compile
    shape: str  # the spec's shape label, e.g. "2048x4096"
    dtype: str
    use: bool
    kernel_ms: float | None = None  # what the evidence measured with the kernel
    fallback_ms: float | None = None  # ... and without it
    evidence: str = "model"  # model | bench
    workload: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return self.mode, self.shape, self.dtype


@dataclass
class Decisions:
    """The decisions of one kernel (one type, one source) and its defaults per mode."""

    kernel_type: str
    table: dict[tuple[str, str, str], Decision] = field(default_factory=dict)
    defaults: dict[str, bool] = field(default_factory=lambda: {"eager": True, "compile": False})

    def add(self, d: Decision) -> None:
        # model-level evidence outranks the bench's op-level timing at the same key
        old = self.table.get(d.key)
        if old is None or old.evidence == "bench" or d.evidence == "model":
            self.table[d.key] = d

    def use(self, mode: str, shape: str, dtype: str) -> bool:
        d = self.table.get((mode, shape, dtype))
        return d.use if d is not None else self.defaults[mode]

    def compile_sets(self) -> tuple[frozenset, frozenset]:
        """(keys decided yes, keys decided no) under compile, as (shape, dtype) pairs: frozen, so a
        compiled graph that looked a key up is never invalidated by a later eager decision."""
        yes = frozenset((s, t) for (m, s, t), d in self.table.items() if m == "compile" and d.use)
        no = frozenset((s, t) for (m, s, t), d in self.table.items() if m == "compile" and not d.use)
        return yes, no


def from_bench(kernel_type: str, per_shape: Iterable[dict], label) -> list[Decision]:
    """Decisions from a bench result's per-shape rows ({shape, latency_us, eager_us, compile_us,
    wall_us}); `label` maps a shape dict to its label. Eager compares the time a host in eager mode
    sees (wall_us where measured, else GPU time) with eager PyTorch's; compile compares GPU times."""
    out = []
    for row in per_shape:
        shape, dtype = label(row["shape"]), row.get("dtype") or ""
        ours = row.get("latency_us")
        if not ours or not dtype:
            continue
        eager_ours = max(ours, row.get("wall_us") or 0.0)
        if row.get("eager_us"):
            eager_ref = max(row["eager_us"], row.get("eager_wall_us") or 0.0)
            out.append(Decision(kernel_type, "eager", shape, dtype, eager_ref >= MIN_GAIN * eager_ours,
                                eager_ours / 1e3, eager_ref / 1e3, "bench"))
        if row.get("compile_us"):
            out.append(Decision(kernel_type, "compile", shape, dtype, row["compile_us"] >= MIN_GAIN * ours,
                                ours / 1e3, row["compile_us"] / 1e3, "bench"))
    return out
