"""What a bench run returns. Plain data, JSON-serialisable, so it crosses the subprocess boundary
and goes into the store without torch."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from autokernel.objective import shape_key

# Too good to be true: a timing past either limit is timed again and, if it still is, flagged for
# review and never kept (`too_good`).
FLAG_SPEEDUP = 10.0  # a speed-up over the library's faster path (the smaller of eager and torch.compile)
FLAG_PCT_PEAK = 120.0  # % of the measured ceiling (the device's copy or cuBLAS), its noise allowed for


def too_good(latency_us: float | None, eager_us: float | None = None, compile_us: float | None = None,
             pct_peak: float | None = None, floor_us: float | None = None) -> bool:
    """Whether a correct candidate's timing is beyond belief, at one shape or over a weighted total.

    Against the library's faster path, not eager alone: eager runs rmsnorm as a chain of about seven
    unfused ops: run 9's best rmsnorm stood at 9.1x eager on an H100, so a slightly better honest
    kernel, or the same one on a faster card, would be flagged and never kept. torch.compile's fused
    kernel is a bar an honest kernel rarely beats tenfold. The roofline catches what a slow library
    would hide: a kernel that moves fewer bytes (or does fewer flops) than the op needs runs past the
    device's measured ceiling: `pct_peak`, or the roofline's least time for the work (`floor_us`,
    bench.ceilings.floor_us)."""
    if not latency_us or latency_us <= 0:
        return False
    library = min((t for t in (eager_us, compile_us) if t), default=None)
    if library and latency_us * FLAG_SPEEDUP < library:
        return True
    if pct_peak is None and floor_us:
        pct_peak = 100.0 * floor_us / latency_us
    return pct_peak is not None and pct_peak > FLAG_PCT_PEAK


def roofline_binds(bound: str, dtype: str) -> bool:
    """Whether the measured ceiling is a limit an honest kernel cannot pass: copy bandwidth, and
    cuBLAS in 16 bits. Not fp32 matmul: its ceiling is cuBLAS without TF32, and a Triton `tl.dot`
    takes TF32 by default, honestly several times past it where the tolerance admits it."""
    return bound == "memory" or dtype in ("float16", "bfloat16")


# Bench outcomes. "correct" is the only one a kernel can be kept with.
CORRECT = "correct"
INCORRECT = "incorrect"  # ran, wrong values / NaN / unwritten output / aliasing / wrong dtype...
CHEAT = "cheat"  # launched no kernel of its own, cached results, or similar
CRASHED = "crashed"  # exception, illegal memory access, process died
COMPILE_ERROR = "compile_error"
TIMEOUT = "timeout"
OOM = "oom"
OUTCOMES = (CORRECT, INCORRECT, CHEAT, CRASHED, COMPILE_ERROR, TIMEOUT, OOM)

STAGES = ("smoke", "shapes", "stability", "determinism", "edge")


class Laps:
    """Seconds per phase into `into` (a result's extra["phases_s"]): laps("smoke") records the time
    since the last lap, or since the Laps was made."""

    def __init__(self, into: dict):
        self.into, self.t = into, time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.into[name] = round(now - self.t, 3)
        self.t = now


@dataclass
class StageVerdict:
    name: str  # one of STAGES
    status: str  # pass | fail | skip | error
    detail: str = ""
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None


@dataclass
class BenchResult:
    kernel_type: str
    backend: str
    outcome: str = CRASHED
    dtype: str = ""
    shape: dict[str, int] = field(default_factory=dict)  # the timed shape
    stages: list[StageVerdict] = field(default_factory=list)
    latency_us: Optional[float] = None  # median
    latency_iqr_us: Optional[float] = None
    wall_us: Optional[float] = None  # per call issued back to back, host-paced (what eager mode sees)
    eager_us: Optional[float] = None
    compile_us: Optional[float] = None
    speedup_vs_eager: Optional[float] = None
    speedup_vs_compile: Optional[float] = None
    tflops: Optional[float] = None
    gbps: Optional[float] = None
    pct_peak: Optional[float] = None  # % of the ceiling that bounds this kernel type
    bound: str = ""  # memory | compute
    peak_vram_mb: Optional[float] = None
    flagged: bool = False  # too good to be true (`too_good`): for review, not trusted
    launched_kernels: list[str] = field(default_factory=list)
    gpu_timing: bool = False  # False under the Triton interpreter / on CPU: timings are not GPU timings
    device: str = ""
    error: Optional[str] = None  # tail of the error output
    duration_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.outcome == CORRECT

    def stage(self, name: str) -> Optional[StageVerdict]:
        return next((s for s in self.stages if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BenchResult":
        data = dict(data)
        data["stages"] = [StageVerdict(**s) for s in data.get("stages", [])]
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def shape_rows(self) -> list[dict]:
        """The per-shape timings, each with the program it ran there when the judge named it
        (bench/programs.py): a later candidate's screen is compared with the kept one's."""
        rows = self.extra.get("per_shape") or []
        named = {shape_key(p.get("shape")): p["program"] for p in self.extra.get("programs") or [] if p.get("program")}
        if not named:
            return rows
        return [{**r, "program": named[k]} if (k := shape_key(r.get("shape"))) in named else r for r in rows]

    def experiment_fields(self) -> dict[str, Any]:
        """The columns of an experiment row that come from this result."""
        status_of = {CORRECT: None, INCORRECT: "incorrect", CHEAT: "incorrect", CRASHED: "crashed",
                     COMPILE_ERROR: "crashed", OOM: "crashed", TIMEOUT: "timeout"}
        fields = {f"stage_{s.name}": s.status for s in self.stages if s.name in STAGES}
        fields.update(
            correctness="PASS" if self.correct else ("FAIL" if self.outcome in (INCORRECT, CHEAT) else "ERROR"),
            latency_us=self.latency_us, latency_iqr_us=self.latency_iqr_us, tflops=self.tflops, gbps=self.gbps,
            pct_peak=self.pct_peak, speedup_vs_eager=self.speedup_vs_eager,
            speedup_vs_compile=self.speedup_vs_compile, eager_us=self.eager_us, compile_us=self.compile_us,
            peak_vram_mb=self.peak_vram_mb, flagged=self.flagged, device=self.device, duration_s=self.duration_s,
            wall_us=self.wall_us, isolation=self.extra.get("isolation"),
            details_json=json.dumps(self.shape_rows()) if self.extra.get("per_shape") else None,
            error=(f"{self.outcome}: {self.error}" if self.error else (None if self.correct else self.outcome)),
        )
        if status_of[self.outcome]:
            fields["status"] = status_of[self.outcome]
        return fields
