"""Time a model at its workloads in every mode users run it, with and without AutoKernel, and decide
per workload which kernels go in.

For each workload (autokernel.workloads), in one process:
- eager: the plain model against the model with the kernels, in alternating rounds (drift hits both);
  with several kernels, each is also left out in turn and dropped when the model is faster without it.
- compile / reduce-overhead: torch.compile(model) and mode="reduce-overhead" (CUDA graphs), without and
  with the kernels. Which kernels are tried is screened per shape first: a kernel goes in only where
  it beats torch.compile of its own reference at that shape (GPU time, bench.timing). Both compiled
  modes share one decision per shape (a traced graph cannot tell which mode compiled it), so the
  kernels stay in only if neither mode is slower with them.
A mode where the kernels lost runs without them: its "with" time is its "without" time, said so in
the row. The headline is the best time with AutoKernel over the best without, across modes.

Times: median milliseconds per call with CUDA events after warm-up (each call waited for, so a host
slower than the GPU shows), its spread, and the host's wall time per call when calls are issued back
to back. Graph breaks and recompiles are counted for every compiled variant.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from autokernel.dispatch import Decision, Decisions
from autokernel.kernels import get_spec
from autokernel.ops import KernelOp
from autokernel.plug import Plug
from autokernel.textfmt import number
from autokernel.workloads import Workload, WorkloadRun

MODES = ("eager", "compile", "reduce-overhead")
MIN_GAIN = 1.005  # a configuration with kernels must be this much faster to be chosen over one without


@dataclass
class Timing:
    ms: float  # median per call
    iqr_ms: float
    wall_ms: float | None = None  # per call, issued back to back (host pace); None on the CPU

    @property
    def worst(self) -> float:
        """The slower of the two ways a user calls the model: one call at a time, or back to back."""
        return max(self.ms, self.wall_ms or 0.0)


def _beats(a: Timing, b: Timing) -> bool:
    """a wins by MIN_GAIN one call at a time and, where measured, back to back: a configuration that is
    faster only by the slower of the two would show as slower in one of the table's columns."""
    if a.ms * MIN_GAIN >= b.ms:
        return False
    return a.wall_ms is None or b.wall_ms is None or a.wall_ms * MIN_GAIN < b.wall_ms


@dataclass
class ModeRow:
    mode: str
    without: Timing | None = None
    with_: Timing | None = None  # the model as AutoKernel runs it in this mode
    kernels: list[str] = field(default_factory=list)  # types whose kernels take calls in this mode
    routes: list[str] = field(default_factory=list)  # types whose routes are installed (compiled modes)
    tried: list[str] = field(default_factory=list)  # types that were timed in the model
    rejected_ms: float | None = None  # the time with the tried kernels, when they lost
    routes_only: Timing | None = None  # compiled modes, routes_apart: the routes installed, every kernel declining
    routes_rel_error: float | None = None  # routes_only's output vs the plain model's in the same mode
    compile_s: float | None = None
    graph_breaks: int | None = None
    recompiles: int | None = None
    rel_error: float | None = None  # with kernels vs the plain model in the same mode
    note: str = ""

    @property
    def speedup(self) -> float | None:
        if self.without is None or self.with_ is None:
            return None
        return self.without.ms / self.with_.ms


@dataclass
class WorkloadResult:
    workload: str  # label
    spec: str  # parse_workload form
    rows: list[ModeRow] = field(default_factory=list)
    shapes: dict[str, list[str]] = field(default_factory=dict)  # type -> "shape dtype" seen
    decisions: list[dict] = field(default_factory=list)
    error: str | None = None

    def best(self, which: str) -> tuple[str, float] | None:
        cands = [(r.mode, getattr(r, which).ms) for r in self.rows if getattr(r, which) is not None]
        return min(cands, key=lambda c: c[1]) if cands else None

    @property
    def speedup(self) -> float | None:
        a, b = self.best("without"), self.best("with_")
        return a[1] / b[1] if a and b else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        bw, bk = self.best("without"), self.best("with_")
        d.update(best_without=bw, best_with=bk, speedup=self.speedup)
        return d


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_step(run: WorkloadRun, model: torch.nn.Module, iters: int, warmup: int = 2) -> Timing:
    """Median ms per step of `model` on the workload (see the module doc)."""
    dev = run.bundle.device
    limit = run.steps_per_reset
    done = 0

    def maybe_reset():
        nonlocal done
        if limit is not None and done >= limit:
            run.reset()
            done = 0

    samples = []
    with torch.inference_mode():
        run.reset()
        for _ in range(warmup):
            maybe_reset()
            run.step(model)
            done += 1
        _sync(dev)
        for _ in range(iters):
            maybe_reset()
            if dev.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run.step(model)
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                run.step(model)
                samples.append((time.perf_counter() - t0) * 1e3)
            done += 1
        wall = None
        if dev.type == "cuda":
            n = min(iters, limit or iters)
            run.reset()
            _sync(dev)
            t0 = time.perf_counter()
            for _ in range(n):
                run.step(model)
            _sync(dev)
            wall = (time.perf_counter() - t0) * 1e3 / n
            run.reset()
    q = statistics.quantiles(samples, n=4) if len(samples) >= 4 else [min(samples), 0, max(samples)]
    return Timing(statistics.median(samples), q[2] - q[0], wall)


def _rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    if out.shape != ref.shape or not torch.isfinite(out).all():
        return float("inf")
    d = out.double() - ref.double()
    return (d.norm() / ref.double().norm().clamp_min(1e-30)).item()


def _output(run: WorkloadRun, model: torch.nn.Module) -> torch.Tensor:
    with torch.inference_mode():
        run.reset()
        out = run.step(model).float().clone()
        run.reset()
    return out


class WorkloadTimer:
    """Times one model at workloads; kernels: type -> KernelOp; decisions: type -> the kernel's
    decisions so far (new ones are added as they are measured)."""

    def __init__(self, bundle, kernels: dict[str, KernelOp], *, iters: int = 20, rounds: int = 3,
                 modes: tuple[str, ...] = MODES, compile_backend: str = "inductor", tolerance: float = 1e-2,
                 screen: bool | None = None, routes_apart: bool = False,
                 progress: Callable[[str], None] | None = None):
        self.bundle, self.kernels = bundle, kernels
        self.iters, self.rounds = iters, rounds
        on_gpu = bundle.device.type == "cuda"
        self.modes = tuple(m for m in modes if m == "eager" or on_gpu or m == "compile")
        self.backend = compile_backend
        self.tolerance = tolerance
        self.screen = on_gpu if screen is None else screen
        # a route changes the model's graph even where no kernel takes a call (the attention route gives a
        # plain causal prefill SDPA's is_causal path): timing the routes alone splits the compiled gain
        # into the routes' part and the kernels' part, at one more compile per mode
        self.routes_apart = routes_apart
        self.progress = progress or (lambda msg: None)

    # -- plugging ----------------------------------------------------------------------------------

    def _plug(self, types: list[str], mode: str, keys: dict[str, set] | None = None) -> Plug:
        """The model with kernels of `types`: in eager everywhere, under compile at `keys` only."""
        decs = {}
        for t in types:
            d = Decisions(t, defaults={"eager": True, "compile": keys is None})
            for shape, dtype in (keys or {}).get(t, ()):
                d.add(Decision(t, "compile", shape, dtype, True))
            decs[t] = d
        return Plug(self.bundle.model, {t: self.kernels[t] for t in types}, decs)

    # -- eager ---------------------------------------------------------------------------------------

    def _alternate(self, run: WorkloadRun, configs: list[list[str] | None]) -> list[Timing]:
        """Time each configuration (kernel types, or None: the plain model) in alternating rounds."""
        samples: list[list[Timing]] = [[] for _ in configs]
        per_round = max(3, self.iters // self.rounds)
        for _ in range(self.rounds):
            for i, types in enumerate(configs):
                if types:
                    with self._plug(types, "eager"):
                        samples[i].append(time_step(run, self.bundle.model, per_round, warmup=1))
                else:
                    samples[i].append(time_step(run, self.bundle.model, per_round, warmup=1))
        out = []
        for ts in samples:
            walls = [t.wall_ms for t in ts if t.wall_ms is not None]
            out.append(Timing(statistics.median(t.ms for t in ts), max(t.iqr_ms for t in ts),
                              statistics.median(walls) if walls else None))
        return out

    def _eager(self, run: WorkloadRun, types: list[str], ref: torch.Tensor) -> ModeRow:
        row = ModeRow("eager", tried=list(types))
        configs: list[list[str] | None] = [None, list(types)]
        if len(types) > 1:
            configs += [[t for t in types if t != drop] for drop in types]
        timings = self._alternate(run, configs)
        row.without = timings[0]
        # eager calls pay the host: a configuration must win both one call at a time and back to back
        best_types, best = list(types), timings[1]
        for cfg, t in zip(configs[2:], timings[2:]):
            if t.worst * MIN_GAIN < best.worst:
                best_types, best = cfg, t
        if best_types and _beats(best, row.without):
            row.kernels, row.with_ = best_types, best
            with self._plug(best_types, "eager"):
                row.rel_error = _rel_error(_output(run, self.bundle.model), ref)
        else:
            row.with_, row.rejected_ms = row.without, best.worst
            row.note = (f"no kernel used: with {', '.join(types)} {best.ms:.3f} ms, back to back "
                        f"{number(best.wall_ms, '.3f')} ms" if types else "no kernel to try")
        return row

    # -- compiled --------------------------------------------------------------------------------------

    def _screen(self, seen: dict[str, set]) -> dict[str, set]:
        """The (type, shape) pairs where the kernel beats torch.compile of its reference (GPU time)."""
        if not self.screen:
            return {t: set(keys) for t, keys in seen.items()}
        from autokernel.bench import timing
        from autokernel.bench.checks import make_inputs

        won: dict[str, set] = {}
        for t, keys in seen.items():
            spec = get_spec(t)
            for shape_label, dtype in keys:
                args = make_inputs(spec, spec.parse_shape(shape_label), getattr(torch, dtype), "cuda", 7)
                ours = timing.time_call(self.kernels[t].fn, args, "cuda")["median_us"]
                try:
                    theirs = timing.time_call(timing.compiled_reference(spec), args, "cuda")["median_us"]
                except Exception as exc:  # an Inductor failure on the reference: the kernel is the only path
                    self.progress(f"  screen {t} {shape_label}: torch.compile of the reference failed ({exc})")
                    theirs = float("inf")
                self.progress(f"  screen {t} {shape_label} {dtype}: kernel {ours:.1f} us, compile {theirs:.1f} us")
                if theirs >= 1.01 * ours:
                    won.setdefault(t, set()).add((shape_label, dtype))
        return won

    def _compiled(self, run: WorkloadRun, mode: str, types: list[str] | None,
                  keys: dict[str, set] | None = None) -> tuple[Timing, dict]:
        """One compiled variant: the plain model (types None), or with the routes of `types` installed
        and their kernels taking the calls at `keys` only."""
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
        plug = self._plug(types, "compile", keys or {}) if types else None
        try:
            compiled = torch.compile(self.bundle.model, mode=None if mode == "compile" else mode,
                                     backend=self.backend, dynamic=False)
            t0 = time.perf_counter()
            out = _output(run, compiled)
            _output(run, compiled)
            compile_s = time.perf_counter() - t0
            graphs = counters["stats"]["unique_graphs"]
            timing = time_step(run, compiled, self.iters, warmup=2)
            info = {"compile_s": compile_s, "graph_breaks": sum(counters["graph_break"].values()),
                    "recompiles": counters["stats"]["unique_graphs"] - graphs, "out": out}
        finally:
            if plug is not None:
                plug.remove()
            torch._dynamo.reset()
        return timing, info

    def _compiled_modes(self, run: WorkloadRun, seen: dict[str, set], ref: torch.Tensor) -> list[ModeRow]:
        modes = [m for m in self.modes if m != "eager"]
        if not modes:
            return []
        keys = self._screen(seen) if seen else {}
        # the attention route matters even where its kernel declines: it gives a plain causal prefill
        # no mask (flash_attention hooks.causal_prefill_mask), so the call can take SDPA's is_causal path
        routes = sorted(set(keys) | ({"flash_attention"} & set(seen)))
        rows = []
        for mode in modes:
            row = ModeRow(mode, tried=sorted(keys))
            self.progress(f"  {mode}: without kernels")
            row.without, info = self._compiled(run, mode, None)
            row.compile_s, row.graph_breaks, row.recompiles = info["compile_s"], info["graph_breaks"], info["recompiles"]
            base_out = info["out"]
            if routes:
                self.progress(f"  {mode}: with {', '.join(sorted(keys)) or 'no kernel'} (routes {', '.join(routes)})")
                with_t, info = self._compiled(run, mode, routes, keys)
                row.rel_error = _rel_error(info["out"], base_out)
                row.with_, row.kernels, row.routes = with_t, sorted(keys), routes
                row.graph_breaks = max(row.graph_breaks, info["graph_breaks"])
                row.recompiles = max(row.recompiles, info["recompiles"])
                row.note = f"compile with kernels {info['compile_s']:.0f} s"
                if self.routes_apart and keys:
                    self.progress(f"  {mode}: routes {', '.join(routes)} alone, every kernel declining")
                    row.routes_only, info = self._compiled(run, mode, routes, {})  # no key: every kernel declines
                    # a route changes the traced graph (the attention route drops a causal mask):
                    # its output is judged like any other, or its time says nothing
                    row.routes_rel_error = _rel_error(info["out"], base_out)
            rows.append(row)
        lost = [r for r in rows if r.with_ is not None and r.with_.ms * MIN_GAIN >= r.without.ms]
        wrong = [r for r in rows if r.rel_error is not None and r.rel_error > self.tolerance]
        for r in rows:
            if not routes:
                r.with_, r.note = r.without, "no kernel used: none beats torch.compile at these shapes"
            elif lost or wrong:
                why = "slower" if lost else f"outputs differ ({max(x.rel_error for x in wrong):.2g})"
                r.rejected_ms = r.with_.ms
                r.note = (f"no kernel used: with {', '.join(routes)} {r.with_.ms:.3f} ms ({why} in "
                          f"{', '.join(x.mode for x in (lost or wrong))})")
                r.with_, r.kernels, r.routes = r.without, [], []
        for r in rows:
            if r.routes_only is not None:
                r.note += f"; routes alone {r.routes_only.ms:.3f} ms"
                if r.routes_rel_error is not None and r.routes_rel_error > self.tolerance:
                    r.note += f" (outputs differ: {r.routes_rel_error:.2g} > {self.tolerance:.2g})"
        return rows

    # -- one workload -----------------------------------------------------------------------------------

    def run(self, workload: Workload) -> WorkloadResult:
        if self.bundle.device.type == "cpu":
            from autokernel.cpu_timing import pinned_threads

            with pinned_threads():  # CPU timings vary several-fold with the thread pool's contention
                return self._run(workload)
        return self._run(workload)

    def _run(self, workload: Workload) -> WorkloadResult:
        res = WorkloadResult(workload.label, workload.spec)
        run = WorkloadRun(self.bundle, workload)
        try:
            run.prepare()
            ref = _output(run, self.bundle.model)
            types = sorted(self.kernels)
            # which shapes each kernel sees at this workload, and whether the model stays correct
            with self._plug(types, "eager") as plug:
                out = _output(run, self.bundle.model)
                rep = plug.report
            seen = {t: set(rep.shapes.get(t, {})) for t in types if rep.shapes.get(t)}
            res.shapes = {t: sorted(f"{s} {d}" for s, d in keys) for t, keys in seen.items()}
            err = _rel_error(out, ref)
            if err > self.tolerance:
                res.error = f"outputs differ with the kernels: relative error {err:.3g} > {self.tolerance:g}"
                seen = {}
            used = sorted(seen)
            if "eager" in self.modes:
                self.progress(f"{workload.label}: eager")
                res.rows.append(self._eager(run, used, ref))
            res.rows += self._compiled_modes(run, seen, ref)
            res.decisions = self._decisions(res, seen)
        finally:
            run.release()
            if self.bundle.device.type == "cuda":
                torch.cuda.empty_cache()
        return res

    def _decisions(self, res: WorkloadResult, seen: dict[str, set]) -> list[dict]:
        out = []
        by_mode = {r.mode: r for r in res.rows}
        for t, keys in seen.items():
            for mode, rows in (("eager", [by_mode.get("eager")]),
                               ("compile", [by_mode.get(m) for m in ("compile", "reduce-overhead")])):
                rows = [r for r in rows if r is not None and t in r.tried]
                if not rows:
                    continue
                r = rows[0]
                use = t in r.kernels
                # what the decision compared: the worse of per-call and back-to-back time in eager mode
                measure = (lambda x: x.worst) if mode == "eager" else (lambda x: x.ms)
                with_ms = measure(r.with_) if use else r.rejected_ms
                for shape, dtype in sorted(keys):
                    out.append(asdict(Decision(t, mode, shape, dtype, use, with_ms, measure(r.without), "model",
                                               res.workload)))
        return out
