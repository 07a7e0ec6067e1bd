"""KernelBench timing, on the GPU (CUDA events) or, without one, by CPU wall clock (labelled):
`time_model` times ModelNew against the eager and torch.compile baselines of the problem's Model
and returns why the candidate is a cheat, or None. The baselines are either supplied with the
request (timed by the trusted harness in a process of its own with the same functions below:
kb/baselines.py) or, without them, timed here on first use and kept per problem in this worker, so
every candidate meets the same live numbers.

Every trial runs on the same input tensors refilled in place with the values of a new seed (outside
the timed region), so a ModelNew that caches by address or by contents never times a cache hit.
A few trials, chosen at random, keep a copy of their output taken the moment the calling stream
finished (before the device-wide synchronize); after the run the copies are compared with the
reference for their inputs and the outputs themselves must not have changed or share memory.
On the GPU the device is synchronized inside every trial: work that ends only after the current
stream's end event (side streams) is refused.
"""

from __future__ import annotations

import gc
import statistics
import time

import torch

from autokernel.bench.across_calls import SAMPLES, Reservoir, Sampled, choose
from autokernel.bench.between_calls import LeftBehind, leftover, primitives
from autokernel.bench.result import too_good
from autokernel.kb.evaluate import SUPPLIED, TIMED_EARLIER, TIMED_NOW
from autokernel.kb.inputs import Inputs, Reference, build_model, flat, tolerance

WARMUP = 3
REPS = 100
QUICK_REPS = 25
SIDE_STREAM_SLACK_US = 50.0
BASELINE_S = 300.0  # eager + torch.compile of the reference on a cold cache
CPU_TIMING = "CPU wall clock under the Triton interpreter (no GPU): not GPU timings, not comparable to published numbers"


_baselines: dict = {}  # (problem code, device) -> baselines_cpu / baselines_gpu, timed here on first use


def kb_sampled(prob, init, device: str, model_seed: int, inputs: Inputs) -> Sampled:
    """Sampled timed outputs of ModelNew, keyed by input seed index, against the problem's Model
    (a stateless one: a call's output depends on its inputs alone)."""
    reference = Reference(prob, init, device, model_seed)
    reference.stateful = False

    def expected(i: int):
        exact = reference.outputs(inputs.made(i))
        floats = [t for t in flat(exact) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        return (exact, *tolerance(floats[0].dtype if floats else torch.float32))

    return Sampled(expected)


STATEFUL = "not checked: the problem's Model is stateful (an output depends on every earlier call)"


def nbytes(values) -> int:
    """Bytes of the tensors among `values` (a tensor, or a tuple/list of values)."""
    items = values if isinstance(values, (tuple, list)) else (values,)
    return sum(v.numel() * v.element_size() for v in items if isinstance(v, torch.Tensor))


def samples_that_fit(total_bytes: int, in_bytes: int, out_bytes: int, samples: int = SAMPLES) -> int:
    """How many timed calls' outputs the check can hold on the device: each sampled call keeps its
    output alive (the ledger: a later call must not overwrite it) and a copy, 2 x out_bytes, next to
    the inputs, the refill's new draw and the live output (3 x each), and the verdict's pass of the
    reference while they are all held: its inputs made again and the forward's working set, taken
    as three outputs; within 85% of the device's memory, never fewer than one.
    KernelBench's level-1 elementwise problems have 6.4 GB inputs and outputs (4096 x 393216 fp32):
    five samples (64 GB) and the rest outgrew an 80 GB H100, and the start crashed out of memory.
    Then L1 91 cumsum_reverse (4.3 GB each) did with four: its reference flips, sums and flips again,
    three outputs' worth beside its inputs, which the count had left to samples."""
    per = 2 * max(1, out_bytes)
    room = 0.85 * total_bytes - 3 * (in_bytes + out_bytes) - (in_bytes + 3 * out_bytes)
    return max(1, min(samples, int(room // per)))


def time_gpu(fn, inputs: Inputs, reps: int, sampled: Sampled | None = None, verify=None) -> dict:
    """KernelBench timing: WARMUP calls, then `reps` trials (the first discarded), each on inputs
    refilled in place after an L2 flush; CUDA events around the call on the calling stream
    (`stream`), and a second end event after a device-wide synchronize (`device`).

    As the bench's timing (bench/between_calls.py): from the first call on, what runs between the
    candidate's calls besides the refill is C functions taken here, the sampled outputs are copied
    with C clone (plain tensors only), the mode stacks, the current stream and the live threads
    are checked after every call (between_calls.LeftBehind), and `verify`, the judge's integrity
    check, runs before any of the events is read or a sample handed to `sampled`."""
    from autokernel.bench.timing import flush_buffer

    flush = flush_buffer("cuda")
    args = inputs.args
    index = torch.cuda.current_device()
    calling = torch.cuda.current_stream()
    total = torch.cuda.get_device_properties(index).total_memory  # before the candidate's first call here
    prims = primitives(guard=verify is not None)  # after the judge's last check, before the first call here
    record, _query, elapsed, event_sync, device_sync, _sleep, zero, clone, state, tensor, _clock = prims
    kind, seq = type, (tuple, list)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(3 * reps)]
    before = state(index)

    def stop(now, why=None):
        device_sync()
        if verify is not None:
            verify()
        raise LeftBehind(why or leftover(before, now))

    out_bytes = 0
    for _ in range(WARMUP):
        out_bytes = nbytes(fn(*args))
        now = state(index)
        if now != before:
            stop(now)
    device_sync()
    chosen = (choose(reps, samples_that_fit(total, nbytes(args), out_bytes), skip_last=False)
              if sampled is not None else set())
    taken = []
    for i in range(reps):
        inputs.refill(1000 + i)
        zero(flush)
        device_sync()
        now = state(index)  # also before the call: a finalizer of its last output runs at `del out`
        if now != before:
            stop(now)
        s, m, e = events[3 * i:3 * i + 3]
        record(s, calling)
        out = fn(*args)
        record(m, calling)
        now = state(index)
        if now != before:
            stop(now)
        if i in chosen:  # copied where the stream ended, before the device-wide synchronize
            outs = out if kind(out) in seq else (out,)
            for o in outs:
                if kind(o) is not tensor:
                    stop(now, "it returned something other than plain torch.Tensor outputs while timed")
            taken.append((1000 + i, out, [clone(o) for o in outs]))
        device_sync()
        record(e, calling)
        event_sync(e)
        del out
    if verify is not None:
        gc.collect(0)  # finalizers of what its calls left, run now, where the check sees them
        verify()  # before any of the judge's Python reads what the run recorded
    stream = [elapsed(events[3 * i], events[3 * i + 1]) * 1e3 for i in range(1, reps)]
    device = [elapsed(events[3 * i], events[3 * i + 2]) * 1e3 for i in range(1, reps)]
    for key, out, copies in taken:
        sampled.take(key, out, copies)
    q = statistics.quantiles(stream, n=4) if len(stream) >= 4 else [min(stream), 0, max(stream)]
    return {"median_us": statistics.median(stream), "iqr_us": q[2] - q[0], "device_us": statistics.median(device),
            "reps": len(stream), "checked_calls": len(chosen)}


def time_cpu(fn, inputs: Inputs, budget_s: float = 2.0, max_reps: int = 20, sampled: Sampled | None = None) -> dict:
    """Wall clock per call, each on inputs refilled in place (outside the clock)."""
    args = inputs.args
    fn(*args)
    samples = []
    kept = Reservoir() if sampled is not None else None  # random timed calls and the last
    end = time.perf_counter() + budget_s
    while len(samples) < 3 or (len(samples) < max_reps and time.perf_counter() < end):
        rep = len(samples)
        inputs.refill(1000 + rep)
        t = time.perf_counter()
        out = fn(*args)
        samples.append((time.perf_counter() - t) * 1e6)
        if kept is not None:
            kept.offer(1000 + rep, out)
        del out
    if kept is not None:
        kept.into(sampled)
    q = statistics.quantiles(samples, n=4)
    return {"median_us": statistics.median(samples), "iqr_us": q[2] - q[0], "reps": len(samples)}




def timing_inputs(prob, device: str, seed: int) -> Inputs:
    """The inputs every timing of a problem runs on (candidate and baselines alike): the judge's
    and the trusted harness's (kb/baseline_worker.py) are the same values."""
    return Inputs(prob, device, seed + 7919)


def exact_fp32() -> None:
    """No TF32 anywhere: what the judge runs under, and so what its baselines are timed under."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def baselines_cpu(prob, init, seed: int, inputs: Inputs) -> dict:
    """The problem's eager Model by CPU wall clock (torch.compile is not timed on the CPU)."""
    torch.manual_seed(seed)
    ref = prob.Model(*init).to("cpu")
    with torch.no_grad():
        eager = time_cpu(ref, inputs)["median_us"]
    return {"eager_us": eager, "compile_us": None, "compile_error": None}


def baselines_gpu(prob, init, seed: int, inputs: Inputs) -> dict:
    """The problem's eager Model and its torch.compile (COMPILE_MODE), each by time_gpu with REPS
    trials, on the same inputs; each stage under its own BASELINE_S alarm. A compile that fails or
    runs out of time leaves compile_us None and says why; the eager time stands."""
    from autokernel.bench import judge as bj
    from autokernel.bench.timing import COMPILE_MODE

    bj.arm(BASELINE_S)
    try:
        ref = build_model(prob.Model, init, "cuda", seed)
        with torch.no_grad():
            eager = time_gpu(ref, inputs, REPS)
        bj.disarm()
        bj.arm(BASELINE_S)
        try:
            compiled = torch.compile(ref, mode=COMPILE_MODE)
            with torch.no_grad():
                comp = time_gpu(compiled, inputs, REPS)["median_us"]
            comp_err = None
        except bj.StageTimeout:
            bj.disarm()
            comp, comp_err = None, f"torch.compile did not finish within {BASELINE_S:.0f} s"
        except Exception as exc:  # an inductor failure must not sink the candidate
            bj.disarm()
            comp, comp_err = None, f"{type(exc).__name__}: {str(exc)[:300]}"
        del ref
        return {"eager_us": eager["median_us"], "compile_us": comp, "compile_error": comp_err}
    finally:
        bj.disarm()


def checked_supplied(supplied, env: dict) -> tuple[dict | None, str | None]:
    """(the supplied baselines, None) when they may stand in for timing here: an eager time, taken on
    this device (the environment's key: name, capability, torch version) under this COMPILE_MODE;
    else (None, why not), and the judge times its own."""
    from autokernel.bench.timing import COMPILE_MODE

    if supplied is None:
        return None, None
    if not isinstance(supplied, dict) or not isinstance(supplied.get("eager_us"), (int, float)) \
            or supplied["eager_us"] <= 0:
        return None, "supplied baselines refused: no eager time in them"
    if supplied.get("device_key") != env.get("key"):
        return None, f"supplied baselines refused: timed on {supplied.get('device_key')!r}, judged on {env.get('key')!r}"
    if supplied.get("compile_mode") != COMPILE_MODE:
        return None, (f"supplied baselines refused: torch.compile mode {supplied.get('compile_mode')!r}, "
                      f"the judge's is {COMPILE_MODE!r}")
    return supplied, None


def _baselines_here(res, key: tuple, supplied: dict | None, measure) -> dict:
    """The baselines the candidate is compared with: the supplied ones, those this process timed for
    the problem earlier, or measure()'s now (kept for the next candidates). Named in res.extra, and
    read into the result before the candidate is timed, whatever its verdict (the parent keeps the
    numbers of the judgement that timed them: kb/evaluate.py)."""
    fresh = supplied is None and key not in _baselines
    if fresh:
        _baselines[key] = measure()
    base = supplied or _baselines[key]
    res.extra["baselines"] = SUPPLIED if supplied else TIMED_NOW if fresh else TIMED_EARLIER
    res.eager_us, res.compile_us = base["eager_us"], base["compile_us"]
    return base


def time_model(res, prob, init, new, seed: int, code: str, quick: bool, deadline: float, notify,
               cuda: bool, stateful: bool = False, supplied: dict | None = None, verify=None,
               input_seed: int | None = None) -> str | None:
    """`stateful`: the problem's Model changes with every call (the correctness trials found it),
    so no timed output can be checked against a reference on its inputs alone; res.extra says so.
    `supplied`: the problem's baselines as the trusted harness timed them in a process of its own
    (kb/baselines.py; the judge checked they are for this device and COMPILE_MODE): used as they
    are, nothing timed here, and never kept in this process's cache. Timed outside the candidate's
    process, the candidate has no chance to disturb its own baselines (a warm-up that evicts, a
    patched torch op, a leftover stream). `verify`: the judge's integrity check (raises), run inside
    the GPU timing before its events are read. `input_seed`: the timed inputs' seeds (the judge's
    secret; `seed` stays the weights' seed)."""
    from autokernel.bench import judge as bj

    device = "cuda" if cuda else "cpu"
    inputs = timing_inputs(prob, device, seed if input_seed is None else input_seed)
    if stateful:
        res.extra["timed_outputs"] = STATEFUL
    if not cuda:
        bj.arm(max(1.0, deadline - time.monotonic() - 0.5))
        sampled = None if stateful else kb_sampled(prob, init, device, seed, inputs)
        with torch.no_grad():
            _baselines_here(res, (code, "cpu"), supplied, lambda: baselines_cpu(prob, init, seed, inputs))
            t = time_cpu(new, inputs, sampled=sampled)
            why = sampled.verdict() if sampled is not None else None
        bj.disarm()
        if why:
            return why
        res.latency_us, res.latency_iqr_us = t["median_us"], t["iqr_us"]
        res.speedup_vs_eager = res.eager_us / res.latency_us if res.latency_us else None
        res.extra["timing"] = CPU_TIMING
        res.extra["compile"] = "not timed on the CPU"
        return None
    return _time_gpu(res, prob, init, new, seed, inputs, code, quick, deadline, notify, stateful, supplied, verify)


def _time_gpu(res, prob, init, new, seed, inputs: Inputs, code: str, quick: bool, deadline: float,
              notify, stateful: bool, supplied: dict | None, verify=None) -> str | None:
    from autokernel.bench import judge as bj
    from autokernel.bench.timing import COMPILE_MODE

    reps = QUICK_REPS if quick else REPS
    baseline_s = 0.0  # the bench's own time: not taken from the candidate's limit

    def measure() -> dict:
        nonlocal baseline_s
        notify({"extend_s": 2 * BASELINE_S})
        t0 = time.monotonic()
        try:
            return baselines_gpu(prob, init, seed, inputs)
        finally:
            baseline_s = time.monotonic() - t0
            notify({"extend_s": baseline_s - 2 * BASELINE_S})

    base = _baselines_here(res, (code, "cuda"), supplied, measure)
    eager_us, comp_us, comp_err = base["eager_us"], base["compile_us"], base.get("compile_error")
    bj.arm(max(1.0, deadline + baseline_s - time.monotonic() - 0.5))
    sampled = None if stateful else kb_sampled(prob, init, "cuda", seed, inputs)
    with torch.no_grad():
        t = time_gpu(new, inputs, reps, sampled, verify)
        if too_good(t["median_us"], eager_us, comp_us):
            t2 = time_gpu(new, inputs, REPS, sampled, verify)  # too good to be true: time again before reporting
            res.extra["first_timing_us"] = t["median_us"]
            t = t2
            res.flagged = too_good(t["median_us"], eager_us, comp_us)
        why = sampled.verdict() if sampled is not None else None
    bj.disarm()
    if why:
        return why
    res.extra.update(device_sync_us=t["device_us"], reps=t["reps"], warmup=WARMUP, compile_mode=COMPILE_MODE,
                     checked_calls=t["checked_calls"],
                     timing="CUDA events, L2 flushed and inputs refilled in place per trial, first trial discarded")
    if comp_err:
        res.extra["compile_error"] = comp_err
    if t["device_us"] > 1.5 * t["median_us"] + SIDE_STREAM_SLACK_US:
        return (f"work outside the timed stream: {t['median_us']:.1f} us between the stream's events but "
                f"{t['device_us']:.1f} us until the device was idle (side streams are not allowed to hide work)")
    res.gpu_timing = True
    res.latency_us, res.latency_iqr_us = t["median_us"], t["iqr_us"]
    res.eager_us, res.compile_us = eager_us, comp_us
    res.speedup_vs_eager = eager_us / t["median_us"] if t["median_us"] > 0 else None
    res.speedup_vs_compile = comp_us / t["median_us"] if comp_us and t["median_us"] > 0 else None
    return None

