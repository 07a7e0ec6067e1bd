"""Prove the optimized model still computes the same thing, and measure what it gained where users run it.

For the run's model (options from its profile): take the best kept kernel of every optimized type
(autokernel.apply_model.best_kernels), register each as a custom op (autokernel.ops), plug each one alone
into the model and compare against the reference on fresh inputs; a kernel that raises or mismatches
is reported by name and left out. On the GPU a kernel whose measured speed-up over eager is not above
1 is checked but left out of the optimized model too. The survivors are then plugged together and
compared again. Then the model is timed at its workloads (prefill and decode for causal LMs,
autokernel.workloads) in eager, torch.compile and reduce-overhead modes, with and without the kernels
(autokernel.workload_timing); which kernels go in is decided per workload, mode and shape, and the
decisions are recorded in the store, where `autokernel.apply` reads them.

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
from pathlib import Path
from typing import Any, Callable

import torch

from autokernel.amdahl import model_speedup
from autokernel.apply_model import KeptKernel, best_kernels
from autokernel.cpu_timing import CPU_LABEL
from autokernel.extract import resolve_profile
from autokernel.models import ModelBundle, load_model, output_tensor
from autokernel.ops import KernelOp, register_source
from autokernel.plug import plugged
from autokernel.store import Store
from autokernel.workload_timing import MODES, WorkloadTimer
from autokernel.workloads import Workload, default_workloads

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
    op: str | None = None  # its custom op, e.g. autokernel::rmsnorm_1a2b3c4d5e
    op_kind: str | None = None  # triton_op | custom_op
    source_hash: str | None = None  # of its source: what the dispatch decisions are recorded under


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
    workloads: list[dict] = field(default_factory=list)  # WorkloadResult.to_dict() per workload

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "VerifyResult":
        known = set(cls.__dataclass_fields__)
        out = cls(**{k: v for k, v in data.items() if k in known})
        out.kernels = [KernelVerdict(**k) for k in data.get("kernels", [])]
        return out


@dataclass
class VerifyPlan:
    """What verify checks, read from the store and the workspace; plain data, so that the loop can
    hand it to a sandboxed child (autokernel.verify_isolated) that never opens the store."""

    model: str
    batch: int = 1
    seq: int | None = None
    dtype: str | None = None
    device: str | None = None
    kernels: list[KeptKernel] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # not plugged: nothing kept by the loop

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in d["kernels"]:
            k["path"] = str(k["path"]) if k["path"] is not None else None
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "VerifyPlan":
        kernels = [KeptKernel(**{**k, "path": Path(k["path"]) if k.get("path") else None})
                   for k in data.get("kernels", [])]
        return cls(**{**data, "kernels": kernels})


def compare(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(relative L2 error, max abs error); NaN/inf or a shape change count as infinitely wrong."""
    if out.shape != ref.shape or not torch.isfinite(out).all():
        return math.inf, math.inf
    diff = (out.double() - ref.double())
    rel = (diff.norm() / ref.double().norm().clamp_min(1e-30)).item()
    return rel, diff.abs().max().item()


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


def _time_workloads(bundle: ModelBundle, ops: dict[str, KernelOp], result: "VerifyResult",
                    workloads: list[Workload] | None, modes: tuple[str, ...] | None, iters: int,
                    compile_backend: str, progress: Callable[[str], None] | None,
                    routes_apart: bool = False) -> None:
    on_gpu = bundle.device.type == "cuda"
    if workloads is None:
        # on a CPU one workload (the profile's) proves the path; its times say nothing of a GPU
        workloads = default_workloads(bundle) if on_gpu else default_workloads(bundle)[:1]
    timer = WorkloadTimer(bundle, ops, iters=iters, rounds=3 if on_gpu else 1,
                          modes=modes or (MODES if on_gpu else ("eager",)), compile_backend=compile_backend,
                          tolerance=result.tolerance, routes_apart=routes_apart, progress=progress)
    for w in workloads:
        try:
            result.workloads.append(timer.run(w).to_dict())
        except Exception as exc:  # one workload failing (out of memory, say) is reported, the rest run
            result.workloads.append({"workload": w.label, "spec": w.spec, "rows": [], "error":
                                     f"{type(exc).__name__}: {str(exc)[:300]}"})
    first = next((w for w in result.workloads if w.get("rows")), None)
    rows = {r["mode"]: r for r in (first or {}).get("rows", [])}
    eager, comp = rows.get("eager"), rows.get("compile")
    if eager is not None:
        result.eager_ms = eager["without"]["ms"]
        # the model with every plugged kernel in, as measured, whether or not the workload kept them
        result.plugged_ms = eager["with_"]["ms"] if eager["kernels"] else (eager["rejected_ms"] or eager["with_"]["ms"])
        result.speedup_vs_eager = result.eager_ms / result.plugged_ms
    if comp is not None:
        result.compile_ms = comp["without"]["ms"]
        if result.plugged_ms:
            result.speedup_vs_compile = result.compile_ms / result.plugged_ms


def reference_output(bundle: ModelBundle, inputs: Any) -> tuple[torch.Tensor, float, str, float | None, str | None]:
    """(reference output, tolerance, what the reference is, eager's distance from it, why there is no
    fp32 copy) for the model's outputs on `inputs`; see the module doc."""
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
    return ref, tol, reference, eager_error, no_copy


def verify(store: Store, workspace: Any, *, run_id: int | None = None, model: str | None = None,
           batch: int | None = None, seq: int | None = None, dtype: str | None = None, device: str | None = None,
           kernels: list[str] | None = None, time_iters: int | None = None,
           with_compile: bool | None = None, record: bool = True,
           bundle: ModelBundle | None = None, min_speedup: float | None = None, only_kept: bool = False,
           workloads: list[Workload] | None = None, modes: tuple[str, ...] | None = None,
           compile_backend: str = "inductor", progress: Callable[[str], None] | None = None,
           routes_apart: bool = False) -> VerifyResult:
    """Plug the best kernels into the model, check outputs, time it at its workloads; see module doc.

    min_speedup: a correct kernel with a measured speed-up over eager not above it is left out of the
    optimized model; default 1.0 on the GPU, none on the CPU (CPU times say nothing of GPU speed,
    so there every correct kernel goes in, to prove correctness). only_kept: plug only kernels the
    loop kept an experiment of (or whose start was timed faster than eager); what the loop's verify
    uses, so that a CPU run does not spend minutes interpreting starters it never improved.
    workloads / modes: what to time (default: every workload of the model and every mode on a GPU;
    the profile's workload in eager mode on a CPU; with_compile=True adds torch.compile there).
    progress: called with a line before each step (a large model on a CPU takes minutes).
    The kernels run in this process: the loop verifies through autokernel.verify_isolated instead."""
    plan = plan_verify(store, workspace, run_id=run_id, model=model, batch=batch, seq=seq, dtype=dtype,
                       device=device, kernels=kernels, only_kept=only_kept)
    result = check_plan(plan, time_iters=time_iters, with_compile=with_compile, bundle=bundle,
                        min_speedup=min_speedup, workloads=workloads, modes=modes, compile_backend=compile_backend,
                        routes_apart=routes_apart, progress=progress)
    if record:
        record_verify(store, result)
    return result


def plan_verify(store: Store, workspace: Any, *, run_id: int | None = None, model: str | None = None,
                batch: int | None = None, seq: int | None = None, dtype: str | None = None,
                device: str | None = None, kernels: list[str] | None = None, only_kept: bool = False) -> VerifyPlan:
    """The model, its options (from its profile unless given) and the kernels to plug in."""
    if run_id is not None:
        run = store.get_run(run_id)
        model = model or run.model
    if model is None:
        latest = store.latest_run("loop") or None
        model = latest.model if latest is not None and latest.model else resolve_profile(store).model
    profile = store.latest_profile(model)
    opts = json.loads(profile.config_json) if profile is not None else {}
    if device is None and opts.get("device"):
        device = "cuda" if opts["device"].startswith("cuda") and torch.cuda.is_available() else "cpu"
    skipped: list[str] = []
    chosen = best_kernels(store, workspace, model, kernels, only_kept=only_kept, skipped=skipped)
    return VerifyPlan(model=model, batch=batch or opts.get("batch") or 1, seq=seq or opts.get("seq"),
                      dtype=dtype or opts.get("dtype"), device=device, kernels=chosen, skipped=skipped)


def check_plan(plan: VerifyPlan, *, time_iters: int | None = None, with_compile: bool | None = None,
               bundle: ModelBundle | None = None, min_speedup: float | None = None,
               workloads: list[Workload] | None = None, modes: tuple[str, ...] | None = None,
               compile_backend: str = "inductor", progress: Callable[[str], None] | None = None,
               routes_apart: bool = False) -> VerifyResult:
    """verify's work without the store: load the model, plug the plan's kernels, compare, time."""
    progress = progress or (lambda message: None)
    model = plan.model
    if bundle is None:
        progress(f"loading {model}")
        bundle = load_model(model, batch=plan.batch, seq=plan.seq, dtype=plan.dtype, device=plan.device)
    on_gpu = bundle.device.type == "cuda"

    if min_speedup is None and on_gpu:
        min_speedup = 1.0

    inputs = bundle.make_inputs(FRESH_SEED)
    progress("the reference output")
    ref, tol, reference, eager_error, no_copy = reference_output(bundle, inputs)

    verdicts: list[KernelVerdict] = []
    good: dict[str, KernelOp] = {}
    skipped = list(plan.skipped)
    candidates = plan.kernels
    for i, kept in enumerate(candidates, 1):
        progress(f"[{i}/{len(candidates)}] {kept.name} plugged in alone")
        speedup = kept.speedup
        v = KernelVerdict(name=kept.name, kernel_type=kept.kernel_type, source=kept.origin,
                          speedup=speedup if speedup is not None else 1.0, measured=speedup is not None,
                          share=kept.share, gain=kept.gain)
        verdicts.append(v)
        try:
            fn = register_source(kept.source)
            v.op, v.op_kind, v.source_hash = fn.name, fn.kind, fn.source_hash
            out, rep = _run_model(bundle, inputs, {kept.kernel_type: fn})
            v.calls, v.fallbacks = rep.calls[kept.kernel_type], rep.fallbacks[kept.kernel_type]
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
            good[kept.kernel_type] = fn

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
    if iters > 0 and result.ok:
        if modes is None and with_compile is not None:
            modes = MODES if with_compile else ("eager",)
            modes = modes if on_gpu else tuple(m for m in modes if m != "reduce-overhead")
        progress("timing the model at its workloads")
        _time_workloads(bundle, good, result, workloads, modes, iters, compile_backend, progress, routes_apart)
        if not on_gpu:
            result.notes.append(f"timed on the CPU ({CPU_LABEL}, median of repeated forward passes; the "
                                "Triton interpreter when no GPU): the times say nothing about GPU speed")
    result.amdahl_prediction = model_speedup((v.share, v.gain) for v in result.plugged)
    return result


def record_verify(store: Store, result: VerifyResult) -> None:
    """The result as a run of kind "verify", and the per-shape decisions of the kernels it plugged in."""
    run = store.create_run("verify", model=result.model, config=result.options, device=result.device)
    result.run_id = run.id
    store.update_run(run.id, notes=json.dumps(result.to_dict()))
    # keyed by device: apply() only reads the decisions measured on the device it runs on
    hashes = {v.kernel_type: v.source_hash for v in result.plugged}
    store.record_dispatch([dict(d, source_hash=hashes[d["kernel_type"]], model=result.model,
                                device=result.device, run_id=run.id)
                           for w in result.workloads for d in w.get("decisions", [])
                           if d["kernel_type"] in hashes])
    store.finish_run(run.id, "finished" if result.ok else "failed")


def _device_label(bundle: ModelBundle) -> str:
    if bundle.device.type == "cuda":
        return torch.cuda.get_device_name(bundle.device)
    return "cpu"
