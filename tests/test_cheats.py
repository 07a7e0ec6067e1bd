"""The planted cheats of issue 19 (tests/cheats/), one or more per family, for the bench and the
KernelBench judge. Each is rejected with a one-line reason a user can read:

1. a throwaway launch of its own, then the library op reached indirectly (torch.ops.aten, getattr
   and importlib strings, tensor methods): the library's share of the work;
2. outputs cached by input address or by a fingerprint of the contents: inputs change in place;
3. the reference reached from inside (the caller's frames, the spec or the problem's Model
   rewritten through gc or sys.modules, a torch function patched): the reference is computed after
   the call, and what the judge trusts is snapshotted;
4. timing tampered with (torch.cuda.Event patched, work left on a side stream);
5. a view of a persistent buffer, overwritten by the next call: earlier outputs are re-checked;
6. a KernelBench ModelNew that subclasses or runs the problem's Model;
and DETERMINISTIC = False without a reason. The CPU runs them under the Triton interpreter; what
only a GPU can show (side streams, GPU-time shares, no fake speed-up from a cache) is in the `gpu`
tests at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from autokernel.bench import CHEAT, COMPILE_ERROR, CORRECT, INCORRECT, BenchWorker

CHEATS = Path(__file__).parent / "cheats"

# file -> (outcome, a phrase of the one-line reason)
BENCH = {
    "lib_aten_ops": (CHEAT, "library/torch ops did"),
    "lib_importlib_getattr": (CHEAT, "library/torch ops did"),
    "cache_by_address": (INCORRECT, "outside atol"),
    "cache_by_fingerprint": (INCORRECT, "reuses the memory of an output it returned before"),
    "stack_peek": (CHEAT, "refused: sys._getframe"),
    "spec_rewrite_gc": (CHEAT, "refused: gc.get_objects"),
    "reference_code_swap": (CHEAT, "reference (its code)"),
    "torch_patch": (CHEAT, "torch.Tensor (a new attribute 'sum')"),
    "event_patch": (CHEAT, "torch.cuda.Event"),
    "median_patch": (CHEAT, "statistics.median"),
    "persistent_buffer": (INCORRECT, "reuses the memory of an output it returned before"),
    "nondeterministic_no_reason": (COMPILE_ERROR, "NONDETERMINISM_REASON"),
    "profiler_toggle": (CHEAT, "library/torch ops did"),
    "spinner_overlap": (CHEAT, "library/torch ops did"),
    "checker_swap": (CHEAT, "modified the bench itself"),
    "thread_left_running": (CHEAT, "a thread it started, still running"),
    "mode_left_active": (CHEAT, "dispatch modes"),
    "subclass_output": (INCORRECT, "subclass of torch.Tensor"),
    "finalizer_patch": (CHEAT, "make_inputs"),
    "watched_side_stream": (CHEAT, "library/torch ops did"),
}
# Where the GPU names a cheat by other evidence than the CPU (none now). watched_side_stream turns
# the profiler's collection off for its watched call: on the H100 (eighteenth session) the library
# share rejected it there, bench and KB alike ("library/torch ops did 100% ... GPU time no kernel the
# profiler saw accounts for 100%"), before the watched floor was asked.
BENCH_GPU: dict = {}
KB = {
    "lib_aten_ops": ("cheat", "library/torch ops did"),
    "lib_tensor_method": ("cheat", "library/torch ops did"),
    "profiler_toggle": ("cheat", "library/torch ops did"),
    "checker_swap": ("cheat", "modified the judge itself"),
    "subclass_output": ("incorrect", "subclass of torch.Tensor"),
    "precomputed_trials": ("incorrect", "trial 1"),
    "cache_by_address": ("incorrect", "trial 2"),
    "stack_peek": ("cheat", "refused: sys._getframe"),
    "reference_rewrite": ("cheat", "modified the judge itself (kb_problem_"),
    "event_patch": ("cheat", "torch.cuda.Event"),
    "median_patch": ("cheat", "statistics.median"),
    "persistent_buffer": ("incorrect", "reuses the memory of an output it returned before"),
    "calls_model": ("cheat", "runs the code of the problem's Model.forward"),
    "super_forward": ("cheat", "runs the code of the problem's Model.forward"),
    "subclass_judge_model": ("cheat", "subclasses the problem's own Model class"),
    "watched_side_stream": ("cheat", "library/torch ops did"),
}
KB_GPU: dict = {}  # see BENCH_GPU


@pytest.fixture(scope="module")
def worker():
    with BenchWorker() as w:
        yield w


@pytest.fixture(scope="module")
def kb_worker():
    from autokernel.kb.evaluate import KBWorker

    with KBWorker() as w:
        yield w


@pytest.fixture(scope="module")
def relu_problem():
    from autokernel.kb.problems import load_problems

    return load_problems("checkout", CHEATS / "kb", level=1)[0]


@pytest.fixture(scope="module")
def relu_problem_gpu():
    from autokernel.kb.problems import load_problems

    return load_problems("checkout", CHEATS / "kb_large", level=1)[0]


def _one_line(text: str) -> None:
    assert text and "\n" not in text and "Traceback" not in text, text


def _rejected(res, expected: tuple[str, str], name: str, gpu: bool = False) -> None:
    """The outcome and a phrase of its one-line reason (on a GPU a library cheat is named by its
    share of the GPU time)."""
    outcome, phrase = expected
    assert res.outcome == outcome, (res.outcome, res.error)
    assert ("of its GPU time" if gpu and name.startswith("lib_") else phrase) in res.error, res.error
    _one_line(res.error)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(BENCH))
def test_bench_rejects_the_planted_cheat(worker, name):
    _rejected(worker.judge(CHEATS / "bench" / f"{name}.py", quick=True, timeout_s=120), BENCH[name], name)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(KB))
def test_kb_judge_rejects_the_planted_cheat(kb_worker, relu_problem, name):
    res = kb_worker.evaluate(relu_problem, (CHEATS / "kb" / f"{name}.py").read_text(), timeout_s=120)
    _rejected(res, KB[name], name)
    assert res.latency_us is None


@pytest.mark.timeout(300)
def test_a_judge_that_caught_tampering_starts_afresh(worker):
    """The worker that saw torch patched is replaced: the next candidate is judged in a clean one."""
    good = Path(__file__).parent / "faults" / "good.py"
    assert worker.judge(good, quick=True, timeout_s=120).outcome == CORRECT  # a live worker to start with
    before = worker.restarts
    assert worker.judge(CHEATS / "bench" / "torch_patch.py", quick=True, timeout_s=120).outcome == CHEAT
    assert worker.judge(good, quick=True, timeout_s=120).outcome == CORRECT
    assert worker.restarts == before + 1


# what the loop's cheap screen (bench/screen.py) already refuses: tampering at import or in a call
# (the worker restarts), a library call, a reused buffer; the rest is left to the full judgement
SCREEN = {
    "torch_patch": (CHEAT, "screen: the candidate modified the bench itself (torch.Tensor (a new attribute 'sum'))"),
    "event_patch": (CHEAT, "torch.cuda.Event"),
    "spec_rewrite_gc": (CHEAT, "refused: gc.get_objects"),
    "lib_aten_ops": (CHEAT, "screen: library/torch ops did"),
    "persistent_buffer": (INCORRECT, "reuses the memory of an output it returned before"),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(SCREEN))
def test_the_screen_refuses_the_planted_cheat(worker, name):
    outcome, phrase = SCREEN[name]
    worker.info  # a live worker to start with
    before = worker.restarts
    res = worker.screen(CHEATS / "bench" / f"{name}.py", shapes=[{"rows": 3, "cols": 40}], timeout_s=120)
    _rejected(res, SCREEN[name], name)
    good = Path(__file__).parent / "faults" / "good.py"
    assert worker.judge(good, quick=True, timeout_s=120).outcome == CORRECT  # never in a tampered process
    assert worker.restarts == before + (outcome == CHEAT and "modified" in res.error)


@pytest.mark.timeout(300)
def test_honest_while_checked_wrong_while_timed_is_caught_by_the_cpu_timing(worker):
    """The loop's CPU judge times a correct candidate on inputs refilled in place and checks two of
    its timed outputs: one that turns to a stale result once the stages are over is a cheat."""
    from autokernel.cpu_timing import CPUTimedJudge

    source = (CHEATS / "bench" / "late_switch.py").read_text()
    res = CPUTimedJudge(worker.judge)(source, kernel_type="reduce", quick=True, timeout_s=120)
    assert res.outcome == CHEAT, (res.outcome, res.error)
    assert "cpu-timing" in res.error and "while timed is wrong" in res.error, res.error
    _one_line(res.error)


@pytest.mark.timeout(300)
def test_fingerprint_cache_never_hits_in_kb_trials_or_timing(kb_worker, relu_problem):
    """Family 2 by contents: every trial and every timed call sees new values in the same tensors,
    so the cache never hits -- it is judged as the kernel it runs, with its own timing."""
    res = kb_worker.evaluate(relu_problem, (CHEATS / "kb" / "cache_by_fingerprint.py").read_text(), timeout_s=120)
    assert res.outcome == CORRECT, res.error
    assert res.latency_us and res.latency_us > 0


def test_timed_calls_see_new_values_in_the_same_memory():
    """What KB and CPU timing present to a candidate: one address, new contents every call."""
    import torch

    from autokernel.bench.across_calls import Refill
    from autokernel.cpu_timing import repeat
    from autokernel.kb.inputs import Inputs
    from autokernel.kb.problems import load_problems
    from autokernel.kb.timing import time_cpu
    from autokernel.kernels import get_spec

    seen = []

    def probe(x, *rest):
        seen.append((x.data_ptr(), hash(x.numpy().tobytes())))
        return x.sum(-1)

    refill = Refill(get_spec("reduce"), {"rows": 4, "cols": 32}, torch.float32, "cpu")
    repeat(lambda: probe(*refill.args), min_runs=6, max_runs=6, before=refill)
    prob = load_problems("checkout", CHEATS / "kb", level=1)[0].load_module()
    time_cpu(probe, Inputs(prob, "cpu", 5), budget_s=0.0, max_reps=4)
    for run in (seen[:6], seen[6:]):
        assert len({p for p, _ in run}) == 1, "the inputs moved"
        assert len({h for _, h in run}) == len(run), "the same contents were presented twice"


# -- what only a GPU shows (lead runs these on the H200) --------------------------------------------------

@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(BENCH))
def test_bench_rejects_the_planted_cheat_on_gpu(worker, name):
    _rejected(worker.judge(CHEATS / "bench" / f"{name}.py", timeout_s=300), BENCH_GPU.get(name, BENCH[name]), name,
              gpu=True)


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_bench_late_switch_is_caught_by_timed_samples_on_gpu(worker):
    res = worker.judge(CHEATS / "bench" / "late_switch.py", quick=True, timeout_s=300)
    _rejected(res, (CHEAT, "while timed is wrong"), "late_switch")


@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["mode", "stream"])
def test_bench_leftovers_between_timed_calls_are_caught_on_gpu(worker, kind):
    """A candidate honest through the stages that, once timed, leaves a dispatch mode (swallowing
    the L2 flush) or another current stream for the judge's next step, and takes it back in its own
    next call: between_calls' state check after every timed call stops the timing."""
    res = worker.judge(CHEATS / "bench" / f"late_{kind}.py", timeout_s=300)
    # the state check between timed calls says "dispatch mode active"; the integrity check after the
    # profiled call, "dispatch modes": whichever of the judge's steps comes first after the switch
    phrase = "dispatch mode" if kind == "mode" else "another CUDA stream current"
    _rejected(res, (CHEAT, phrase), f"late_{kind}")


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_bench_own_work_only_while_profiled_is_caught_on_gpu(worker):
    res = worker.judge(CHEATS / "bench" / "watched_honest.py", timeout_s=300)
    _rejected(res, (CHEAT, "when the profiler watches"), "watched_honest")


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_bench_side_stream_is_rejected_on_gpu(worker):
    res = worker.judge(CHEATS / "bench" / "side_stream.py", timeout_s=300)
    assert res.outcome in (CHEAT, INCORRECT), (res.outcome, res.error)
    assert "timing" in res.error or "outside atol" in res.error or "NaN" in res.error, res.error
    _one_line(res.error)


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_fingerprint_cache_gains_no_speed_on_gpu(worker):
    """Timing refills the inputs in place: a cache by contents is never hit while timed, so the
    cheat is timed on its own work (plus its fingerprint), never faster than the honest kernel."""
    from autokernel.kernels import starter_path

    shapes = [{"rows": 4096, "cols": 4096}]
    honest = worker.judge(starter_path("reduce", "triton"), shapes=shapes, timeout_s=300, quick=True)
    cheat = worker.judge(CHEATS / "bench" / "cache_by_fingerprint.py", shapes=shapes, timeout_s=300, quick=True)
    assert honest.outcome == CORRECT, honest.error
    if cheat.outcome == CORRECT:  # judged as the kernel it runs
        assert cheat.latency_us >= 0.8 * honest.latency_us


@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(KB) + ["side_stream", "late_stream", "watched_honest"])
def test_kb_judge_rejects_the_planted_cheat_on_gpu(kb_worker, relu_problem_gpu, name):
    res = kb_worker.evaluate(relu_problem_gpu, (CHEATS / "kb" / f"{name}.py").read_text(), timeout_s=300)
    if name in ("late_stream", "watched_honest"):
        phrase = "another CUDA stream current" if name == "late_stream" else "when the profiler watches"
        _rejected(res, ("cheat", phrase), name)
        return
    if name == "side_stream":
        assert res.outcome == "cheat" and ("side streams" in res.error or "timed is wrong" in res.error), res.error
        _one_line(res.error)
        return
    _rejected(res, KB_GPU.get(name, KB[name]), name, gpu=True)


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_the_anticheat_adds_under_a_fifth_to_a_judgement_on_gpu(worker):
    """Issue 19: the judge's cost per candidate grows by < 20%. What the anti-cheat adds to a
    judgement (inputs refilled and outputs sampled in the timing loop, its guard around every call,
    the refilled wall-clock pass, the warm profiled call per timed shape for the library share and
    the watched-work check, the private integrity check after every call),
    measured here against the same timing without them, over the rest of a warm judgement of the
    rmsnorm starter (compiled kernel and baselines cached: the smallest a loop's judgement gets)."""
    import time
    from types import SimpleNamespace

    import torch

    from autokernel.bench import timing
    from autokernel.bench.across_calls import Refill, Sampled, spec_expected
    from autokernel.bench.judge import integrity_guard
    from autokernel.bench.time_candidate import library_at
    from autokernel.kernelfile import entry_point, import_kernel, read_kernel_file
    from autokernel.kernels import get_spec, starter_path

    REPS = 200  # the judge's floor for a candidate's timing (time_candidate.py)
    spec, path = get_spec("rmsnorm"), starter_path("rmsnorm", "triton")
    shapes = list(spec.default_shapes)
    assert worker.judge(path, shapes=shapes, timeout_s=600).outcome == CORRECT  # compile and baselines
    res = worker.judge(path, shapes=shapes, timeout_s=600)
    assert res.outcome == CORRECT
    fn = entry_point(import_kernel(read_kernel_file(path)))

    def seconds(work) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        work()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    added = 0.0
    parts = {"refill": 0.0, "guard and samples": 0.0, "wall refill": 0.0, "profiled call": 0.0}
    for shape in shapes:
        refill = Refill(spec, shape, torch.bfloat16, "cuda")
        args = refill.args

        # what the judge runs: the guarded timing loop (state checked around every call, the
        # private integrity check before the events are read) and the warm profiled call behind its
        # lead sleep, with the watched-work check against the timed median
        guard = integrity_guard()

        def sampled_run():
            sampled = Sampled(spec_expected(spec, refill))
            timing.time_call(fn, args, "cuda", min_reps=REPS, refill=refill, on_sample=sampled.take, verify=guard)
            guard()
            assert sampled.verdict() is None

        def profiled():
            r = reps["samples"]
            why = library_at(SimpleNamespace(verify=guard), spec, fn, refill, r["host_rep_us"], r["median_us"])
            assert why is None, why

        reps = {}  # what one repetition costs the host and the GPU, plain and refilled

        def timed(name, **more):
            reps[name] = timing.time_call(fn, args, "cuda", min_reps=REPS, **more)

        steps = {"plain": lambda: timed("plain"),
                 "refill": lambda: timed("refill", refill=refill),
                 "samples": lambda: timed("samples", refill=refill, verify=guard),
                 "guarded samples": sampled_run,
                 "plain wall": lambda: timing.wall_call(fn, args),
                 "wall refill": lambda: timing.wall_call(fn, args, refill=refill),
                 "profiled call": profiled}
        t = {name: min(seconds(work), seconds(work)) for name, work in steps.items()}
        parts["refill"] += max(0.0, t["refill"] - t["plain"])
        parts["guard and samples"] += max(0.0, t["guarded samples"] - t["refill"])
        parts["wall refill"] += max(0.0, t["wall refill"] - t["plain wall"])
        parts["profiled call"] += t["profiled call"]
        print(spec.shape_label(shape), ", ".join(
            f"{k}: {r['reps']} reps, host {r['host_rep_us']:.0f} us, GPU {r['gpu_rep_us']:.0f} us per rep, "
            f"{1e3 * t[k]:.0f} ms" for k, r in reps.items()))
    added += sum(parts.values())
    guard = integrity_guard()
    per_check = seconds(lambda: [guard() for _ in range(200)]) / 200
    calls = sum(int(s.detail.split()[0]) for s in res.stages if s.detail and s.detail.split()[0].isdigit())
    added += per_check * (calls + 10)
    growth = added / (res.duration_s - added)
    print(f"judgement {res.duration_s:.2f} s, anti-cheat {added:.2f} s ({100 * growth:.1f}% more); "
          f"integrity {1e3 * per_check:.2f} ms per call x {calls} calls; "
          + ", ".join(f"{k} {v:.3f} s" for k, v in parts.items()))
    assert growth < 0.2, (res.duration_s, added)
