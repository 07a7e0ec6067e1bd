"""Which kernels did the candidate launch? The anti-cheat's evidence.

On the GPU: kernel names from torch.profiler's CUDA activity, plus the Triton functions run.
Under the Triton interpreter there is no GPU profiler, so the JIT functions' run() is wrapped:
a launch counts as the candidate's own when the jitted function was defined in its file.
A candidate that launches nothing of its own (only the library op it replaces, generic aten
kernels, or torch.compile's generated ones) is rejected as a cheat.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field

# Kernels any torch code may launch that are not a candidate's own work: aten's elementwise /
# copy / fill / reduce kernels, memcpy/memset, and what inductor generates for torch.compile.
GENERIC_PATTERNS = ("at::native::", "elementwise_kernel", "vectorized_elementwise", "unrolled_elementwise",
                    "reduce_kernel", "CatArrayBatchedCopy", "Memcpy", "Memset", "memcpy", "memset",
                    "triton_poi_", "triton_red_", "triton_per_", "triton_tem_", "triton__")


@dataclass
class Launches:
    triton_own: list[str] = field(default_factory=list)  # jitted functions defined in the candidate file
    triton_other: list[str] = field(default_factory=list)
    gpu_kernels: list[str] = field(default_factory=list)  # profiler names (GPU only)

    def names(self) -> list[str]:
        seen: dict[str, None] = {}
        for n in self.gpu_kernels + self.triton_own:
            seen.setdefault(n, None)
        return list(seen)


def _triton_classes() -> list:
    classes = []
    try:
        from triton.runtime.jit import JITFunction
        classes.append(JITFunction)
    except Exception:
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    except Exception:
        pass
    return classes


@contextlib.contextmanager
def record_triton(module_name: str, launches: Launches):
    """Wrap run() of Triton's JIT classes for the duration; every launch is attributed by the
    module its Python function was defined in."""
    patched = []
    for cls in _triton_classes():
        orig = cls.run

        def run(self, *args, __orig=orig, **kwargs):
            fn = getattr(self, "fn", None)
            name = getattr(fn, "__name__", "?")
            if getattr(fn, "__module__", None) == module_name:
                launches.triton_own.append(name)
            else:
                launches.triton_other.append(name)
            return __orig(self, *args, **kwargs)

        cls.run = run
        patched.append((cls, orig))
    try:
        yield launches
    finally:
        for cls, orig in patched:
            cls.run = orig


@contextlib.contextmanager
def record_gpu(launches: Launches):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        yield launches
    for evt in prof.events():
        dev = str(getattr(evt, "device_type", ""))
        if dev.endswith("CUDA") and evt.name:
            if "Memcpy" in evt.name or "Memset" in evt.name:
                continue
            launches.gpu_kernels.append(evt.name)


def is_foreign(name: str, library_patterns: tuple[str, ...]) -> bool:
    return any(p in name for p in library_patterns) or any(p in name for p in GENERIC_PATTERNS)


def cheat_reason(launches: Launches, library_patterns: tuple[str, ...], on_gpu: bool) -> str | None:
    """None when the candidate launched work of its own; else why it is rejected."""
    if on_gpu:
        own = [n for n in launches.gpu_kernels if not is_foreign(n, library_patterns)]
        if own or launches.triton_own:
            return None
        if not launches.gpu_kernels:
            return "launched no GPU kernel at all"
        shown = ", ".join(sorted(set(launches.gpu_kernels))[:5])
        return f"launched only library/generic kernels ({shown}), none of its own"
    if launches.triton_own:
        return None
    if launches.triton_other:
        return f"launched only Triton functions from elsewhere ({', '.join(sorted(set(launches.triton_other))[:5])})"
    return "never launched a triton.jit function of its own file"


def short_name(name: str, limit: int = 120) -> str:
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= limit else name[:limit] + "..."
