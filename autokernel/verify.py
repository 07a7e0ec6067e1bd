"""Prove the optimized model still computes the same thing, and measure what it gained.

For the run's model (options from its profile): take the best kept kernel of every optimized type
(Store.best_experiment -> its commit in the workspace; else the branch head; else the starter),
plug each one alone into the model and compare against the reference on fresh inputs; a kernel that
raises or mismatches is reported by name and left out. On the GPU a kernel whose measured speed-up
over eager is not above 1 is checked but left out of the optimized model too: plugging a slower
kernel in would only make the model slower. The survivors are then plugged together, compared
again, and the whole forward pass is timed against eager and torch.compile.

The reference and tolerance: an fp32 model is compared with its own eager output (relative L2
1e-4). A half-precision model is compared with an fp32 copy of itself, and the tolerance is
derived from how far eager half precision already is from that fp32 answer: a kernel may make the
model at most NOISE_FACTOR times as far from it (never less than one rounding of the dtype). A
fixed number would be wrong for some model: errors compound over depth, so a 32-layer model in
bf16 is legitimately further from fp32 than a 2-layer one. The
end-to-end speed-up is reported next to the Amdahl prediction 1 / (1 - sum f_i (1 - 1/s_i)) over
the kernels plugged in, with f_i their profile shares and s_i their best experiments' speed-ups by
the loop's rule (autokernel.amdahl): over eager where measured, else over the kernel's start.

The result is recorded as a run of kind "verify" (options in config_json, the result JSON in notes).
"""

from __future__ import annotations

import copy
import json
import math
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from autokernel.amdahl import kernel_speedup, model_speedup
from autokernel.cpu_timing import CPU_LABEL
from autokernel.errors import NotFoundError
from autokernel.extract import resolve_profile
from autokernel.kernelfile import entry_point, import_kernel, parse_source
from autokernel.kernels import KERNEL_TYPES, starter_path
from autokernel.models import ModelBundle, load_model, output_tensor
from autokernel.plug import plugged
from autokernel.profile import time_forward
from autokernel.store import Store

# Relative L2 error allowed against the fp32 reference: the fixed one for fp32 models, and for half
# precision the floor under the derived one (about one rounding: 2^-11, 2^-8).
REL_TOLERANCE = {"float32": 1e-4, "float16": 5e-4, "bfloat16": 4e-3}
NOISE_FACTOR = 2.0
# When no fp32 copy fits in memory: half precision is compared with its own eager output at these
# fixed tolerances (looser: they must cover a deep model's drift without knowing it).
EAGER_FALLBACK_TOLERANCE = {"float16": 1e-2, "bfloat16": 4e-2}
FRESH_SEED = 4242  # not the profiling seed (0): kernels are checked on inputs they have not seen


@dataclass
class KernelVerdict:
    name: str
    kernel_type: str
    source: str  # "experiment N (sha)" | "branch head" | "starter"
    speedup: float  # vs eager, from its best experiment (1.0 when none)
    measured: bool = False  # the speed-up comes from a timed experiment
    share: float = 0.0  # of the model's time, from the profile the kernel was extracted from
    gain: float = 1.0  # the speed-up the Amdahl prediction uses (autokernel.amdahl.kernel_speedup)
    ok: bool = False  # correct inside the model
    slower: bool = False  # correct, but left out of the optimized model: not faster than eager
    rel_error: float | None = None
    max_abs_error: float | None = None
    calls: int = 0
    fallbacks: int = 0
    error: str | None = None


@dataclass
class VerifyResult:
    model: str
    options: dict[str, Any]
    device: str
    dtype: str
    kernels: list[KernelVerdict]
    ok: bool  # the combined model matches the original
    rel_error: float | None
    max_abs_error: float | None
    tolerance: float
    reference: str = "eager"  # what outputs are compared with: "eager" | "float32 copy"
    eager_error: float | None = None  # eager half precision vs the fp32 copy (the noise the tolerance is from)
    eager_ms: float | None = None
    plugged_ms: float | None = None
    compile_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    amdahl_prediction: float | None = None
    run_id: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[KernelVerdict]:
        return [k for k in self.kernels if not k.ok]

    @property
    def plugged(self) -> list[KernelVerdict]:
        return [k for k in self.kernels if k.ok and not k.slower]

    @property
    def slower(self) -> list[KernelVerdict]:
        return [k for k in self.kernels if k.ok and k.slower]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["failed"] = [k.name for k in self.failed]
        d["slower"] = [k.name for k in self.slower]
        return d


def compare(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(relative L2 error, max abs error); NaN/inf or a shape change count as infinitely wrong."""
    if out.shape != ref.shape or not torch.isfinite(out).all():
        return math.inf, math.inf
    diff = (out.double() - ref.double())
    rel = (diff.norm() / ref.double().norm().clamp_min(1e-30)).item()
    return rel, diff.abs().max().item()


def _load_fn(source: str) -> Callable:
    return entry_point(import_kernel(parse_source(source)))


def _candidates(store: Store, workspace: Any, model: str, names: list[str] | None,
                only_kept: bool = False, skipped: list[str] | None = None) -> list[tuple[Any, str, str, float | None, float]]:
    """(kernel row, source, where it came from, speed-up over eager or None, speed-up for the Amdahl
    prediction) of the best kernel per type. only_kept: a kernel the loop never improved (its best
    is its start, and no timing says that start beats eager) is not a candidate unless named; its
    name goes to `skipped`."""
    rows = store.list_kernels(model=model)
    if names:
        missing = set(names) - {k.name for k in rows}
        if missing:
            raise NotFoundError(f"kernel(s) {', '.join(sorted(missing))} not found for {model}")
        rows = [k for k in rows if k.name in names]
    best_per_type: dict[str, tuple] = {}
    for k in rows:
        if k.kernel_type not in KERNEL_TYPES:
            continue
        best = store.best_experiment(k.id)
        if only_kept and not names and not (best is not None and (best.status == "kept" or best.speedup_vs_eager)):
            if skipped is not None:
                skipped.append(k.name)
            continue
        if best is not None and best.commit and workspace is not None:
            source, origin = workspace.read(k.name, best.commit), f"experiment {best.number} ({best.commit[:10]})"
        elif workspace is not None and workspace.has_kernel(k.name):
            source, origin = workspace.read(k.name), "branch head"
        else:
            source, origin = starter_path(k.kernel_type, k.backend).read_text(), "starter"
        speedup = float(best.speedup_vs_eager) if best is not None and best.speedup_vs_eager else None
        starts = [e for e in store.list_experiments(kernel_id=k.id, status="baseline") if e.latency_us]
        gain = kernel_speedup(speedup, starts[-1].latency_us if starts else None,
                              best.latency_us if best is not None else None)
        current = best_per_type.get(k.kernel_type)
        if current is None or (speedup or 0.0) > (current[3] or 0.0):
            best_per_type[k.kernel_type] = (k, source, origin, speedup, gain)
    return list(best_per_type.values())


def _run_model(bundle: ModelBundle, inputs: Any, kernels: dict[str, Callable]) -> tuple[torch.Tensor, Any]:
    with torch.inference_mode(), plugged(bundle.model, kernels) as rep:
        out = output_tensor(bundle.forward(inputs)).float().clone()
    return out, rep


def _float32_inputs(inputs: Any) -> Any:
    cast = (lambda v: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
    return {k: cast(v) for k, v in inputs.items()} if isinstance(inputs, dict) else tuple(cast(v) for v in inputs)


def _fp32_copy_blocker(bundle: ModelBundle) -> str | None:
    """Why an fp32 copy of the model would not fit next to it on its GPU (None: it fits, or CPU)."""
    if bundle.device.type != "cuda":
        return None
    tensors = list(bundle.model.parameters()) + list(bundle.model.buffers())
    need = sum(t.numel() * 4 for t in tensors if t.is_floating_point())
    free, _total = torch.cuda.mem_get_info(bundle.device)
    # weights in fp32 plus room for the fp32 forward's activations
    if need * 1.25 > free:
        return f"an fp32 copy needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
    return None


def _float32_reference(bundle: ModelBundle, inputs: Any) -> torch.Tensor:
    """The output of an fp32 copy of the model (same weights) on the same inputs."""
    m32 = copy.deepcopy(bundle.model).float()
    try:
        with torch.inference_mode():
            return output_tensor(bundle.forward(_float32_inputs(inputs), model=m32)).float().clone()
    finally:
        del m32
        if bundle.device.type == "cuda":
            torch.cuda.empty_cache()


def _time_all(bundle: ModelBundle, inputs: Any, kernels: dict[str, Callable], iters: int,
              with_compile: bool, notes: list[str]) -> tuple[float, float, float | None]:
    eager = time_forward(bundle, iters=iters, inputs=inputs)
    with plugged(bundle.model, kernels):
        fast = time_forward(bundle, iters=iters, inputs=inputs)
    compiled_ms = None
    if with_compile:
        try:
            compiled = torch.compile(bundle.model)
            compiled_ms = time_forward(bundle, iters=iters, warmup=3, inputs=inputs, model=compiled)
        except Exception as exc:  # torch.compile failing is a fact to report, not a verify failure
            notes.append(f"torch.compile failed: {type(exc).__name__}: {str(exc)[:200]}")
    return eager, fast, compiled_ms


def verify(store: Store, workspace: Any, *, run_id: int | None = None, model: str | None = None,
           batch: int | None = None, seq: int | None = None, dtype: str | None = None, device: str | None = None,
           kernels: list[str] | None = None, time_iters: int | None = None,
           with_compile: bool | None = None, record: bool = True,
           bundle: ModelBundle | None = None, min_speedup: float | None = None, only_kept: bool = False,
           progress: Callable[[str], None] | None = None) -> VerifyResult:
    """Plug the best kernels into the model, check outputs, time the forward pass; see module doc.

    min_speedup: a correct kernel with a measured speed-up over eager not above it is left out of the
    optimized model; default 1.0 on the GPU, none on the CPU (CPU times say nothing of GPU speed,
    so there every correct kernel goes in, to prove correctness). only_kept: plug only kernels the
    loop kept an experiment of (or whose start was timed faster than eager); what the loop's verify
    uses, so that a CPU run does not spend minutes interpreting starters it never improved.
    progress: called with a line before each step (a large model on a CPU takes minutes)."""
    progress = progress or (lambda message: None)
    if run_id is not None:
        run = store.get_run(run_id)
        model = model or run.model
    if model is None:
        latest = store.latest_run("loop") or None
        model = latest.model if latest is not None and latest.model else resolve_profile(store).model
    profile = store.latest_profile(model)
    opts = json.loads(profile.config_json) if profile is not None else {}
    batch = batch or opts.get("batch") or 1
    seq = seq or opts.get("seq")
    dtype = dtype or opts.get("dtype")
    if device is None and opts.get("device"):
        device = "cuda" if opts["device"].startswith("cuda") and torch.cuda.is_available() else "cpu"
    if bundle is None:
        progress(f"loading {model}")
        bundle = load_model(model, batch=batch, seq=seq, dtype=dtype, device=device)
    on_gpu = bundle.device.type == "cuda"

    if min_speedup is None and on_gpu:
        min_speedup = 1.0

    inputs = bundle.make_inputs(FRESH_SEED)
    progress("the reference output")
    with torch.inference_mode():
        ref = output_tensor(bundle.forward(inputs)).float().clone()
    tol, reference, eager_error, no_copy = REL_TOLERANCE[bundle.dtype_name], "eager", None, None
    if bundle.dtype != torch.float32:
        no_copy = _fp32_copy_blocker(bundle)
        if no_copy is None:
            try:
                ref32 = _float32_reference(bundle, inputs)
            except (torch.cuda.OutOfMemoryError, MemoryError) as exc:
                no_copy = f"the fp32 copy ran out of memory ({type(exc).__name__})"
            else:
                eager_error, ref, reference = compare(ref, ref32)[0], ref32, "float32 copy"
                if math.isfinite(eager_error):
                    tol = max(tol, NOISE_FACTOR * eager_error)
        if no_copy is not None:
            tol = EAGER_FALLBACK_TOLERANCE[bundle.dtype_name]

    verdicts: list[KernelVerdict] = []
    good: dict[str, Callable] = {}
    skipped: list[str] = []
    candidates = _candidates(store, workspace, model, kernels, only_kept, skipped)
    for i, (row, source, origin, speedup, gain) in enumerate(candidates, 1):
        progress(f"[{i}/{len(candidates)}] {row.name} plugged in alone")
        v = KernelVerdict(name=row.name, kernel_type=row.kernel_type, source=origin,
                          speedup=speedup if speedup is not None else 1.0, measured=speedup is not None,
                          share=float(row.share or 0.0), gain=gain)
        verdicts.append(v)
        try:
            fn = _load_fn(source)
            out, rep = _run_model(bundle, inputs, {row.kernel_type: fn})
            v.calls, v.fallbacks = rep.calls[row.kernel_type], rep.fallbacks[row.kernel_type]
            v.rel_error, v.max_abs_error = compare(out, ref)
            v.ok = v.rel_error <= tol
            if not v.ok:
                v.error = f"outputs differ when plugged alone: relative error {v.rel_error:.3g} > {tol:g}"
            elif v.calls == 0:
                v.error = "the model never called it (nothing of this type to replace)"
        except Exception as exc:  # an untrusted kernel may fail in any way; it is left out, not fatal
            v.error = f"{type(exc).__name__}: {str(exc)[:300]}"
            tail = traceback.format_exc().strip().splitlines()[-1]
            v.error += f" [{tail[:200]}]" if tail not in v.error else ""
        if v.ok and min_speedup is not None and v.measured and v.speedup <= min_speedup:
            v.slower = True
            v.error = f"correct, but not faster than eager ({v.speedup:.2f}x): left out of the optimized model"
        if v.ok and not v.slower:
            good[row.kernel_type] = fn

    result = VerifyResult(model=model, options=bundle.options(), device=_device_label(bundle),
                          dtype=bundle.dtype_name, kernels=verdicts, ok=True, rel_error=0.0, max_abs_error=0.0,
                          tolerance=tol, reference=reference, eager_error=eager_error)
    if no_copy is not None:
        result.notes.append(f"no fp32 reference ({no_copy}): compared with eager {bundle.dtype_name} at the "
                            f"fixed tolerance {tol:g}")
    if eager_error is not None:
        result.notes.append(f"reference: an fp32 copy of the model; eager {bundle.dtype_name} is {eager_error:.3g} "
                            f"from it, so the tolerance is {tol:.3g} ({NOISE_FACTOR:g}x that, at least "
                            f"{REL_TOLERANCE[bundle.dtype_name]:g})")
    if bundle.input_fn is None:
        result.notes.append("the factory gives no input generator: checked on its example inputs, not fresh ones")
    if skipped:
        result.notes.append(f"not plugged (nothing kept by the loop): {', '.join(skipped)}")
    if good:
        progress(f"{len(good)} kernel(s) plugged in together")
        out, rep = _run_model(bundle, inputs, good)
        result.rel_error, result.max_abs_error = compare(out, ref)
        result.ok = result.rel_error <= tol
        for v in result.plugged:
            v.calls, v.fallbacks = rep.calls[v.kernel_type], rep.fallbacks[v.kernel_type]
        if not result.ok:
            result.notes.append(f"each kernel matched alone but together the relative error is "
                                f"{result.rel_error:.3g} > {tol:g}")
    else:
        result.notes.append("no kernel could be plugged in; the model ran as eager PyTorch")

    iters = time_iters if time_iters is not None else (20 if on_gpu else 2)
    if iters > 0:
        use_compile = on_gpu if with_compile is None else with_compile
        progress("timing the forward pass")
        result.eager_ms, result.plugged_ms, result.compile_ms = _time_all(bundle, inputs, good, iters,
                                                                          use_compile, result.notes)
        result.speedup_vs_eager = result.eager_ms / result.plugged_ms if result.plugged_ms else None
        if result.compile_ms:
            result.speedup_vs_compile = result.compile_ms / result.plugged_ms
        if not on_gpu:
            result.notes.append(f"timed on the CPU ({CPU_LABEL}, median of repeated forward passes; the "
                                "Triton interpreter when no GPU): the times say nothing about GPU speed")
    result.amdahl_prediction = model_speedup((v.share, v.gain) for v in result.plugged)

    if record:
        run = store.create_run("verify", model=model, config=bundle.options(), device=result.device)
        result.run_id = run.id
        store.update_run(run.id, notes=json.dumps(result.to_dict()))
        store.finish_run(run.id, "finished" if result.ok else "failed")
    return result


def _device_label(bundle: ModelBundle) -> str:
    if bundle.device.type == "cuda":
        return torch.cuda.get_device_name(bundle.device)
    return "cpu"
