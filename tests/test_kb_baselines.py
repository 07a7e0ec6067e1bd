"""The trusted harness's baselines (autokernel/kb/baselines.py, kb/baseline_worker.py) and the level
runner's baselines phase (benchmarks/kb_levels.py): supplied numbers stand in for the judge's own
timing, parallel compiles share one cache that a later process hits, a failing compile is recorded,
the phase resumes.

On the CPU torch.compile is inductor's C++ backend: a ReLU compiles in ~10 s cold and loads from the
cache in ~3 s, so the cache tests compile for real (default mode, the judge's COMPILE_MODE) on tiny
problems, once per module."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from test_kb import GOOD, LINEAR_RELU, RELU, make_checkout, solution

ROOT = Path(__file__).resolve().parents[1]
HAS_CUDA = torch.cuda.is_available()
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CRASH = RELU.replace("return torch.relu(x)", "import os\n        os._exit(3)")
RAISES = RELU.replace("return torch.relu(x)", "raise ValueError('no forward here')")
WIDER = RELU.replace("torch.randn(8, 64)", "torch.randn(4, 96)")


def _runner():
    spec = importlib.util.spec_from_file_location("kb_levels_under_test", ROOT / "benchmarks" / "kb_levels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    from autokernel.kb.problems import load_problems

    root = make_checkout(tmp_path_factory.mktemp("kbbase"), {1: {
        "1_ReLU.py": RELU, "2_Linear_ReLU.py": LINEAR_RELU, "3_Crash.py": CRASH, "4_Raises.py": RAISES,
        "5_Wider.py": WIDER}})
    return {p.problem_id: p for p in load_problems("checkout", root, level=1)}


@pytest.fixture(scope="module")
def judge():
    from autokernel.kb.evaluate import KBWorker

    with KBWorker() as w:
        yield w


@pytest.fixture(scope="module")
def measured(checkout, tmp_path_factory):
    """The ReLU problem's baselines from the trusted process (a cache folder of its own)."""
    from autokernel.kb.baselines import BaselineWorker

    with BaselineWorker(tmp_path_factory.mktemp("measure_cache")) as w:
        return w.measure(checkout[1])


def test_the_trusted_process_times_what_the_judge_would(measured, judge):
    b = measured["baselines"]
    assert b["eager_us"] > 0 and b["device_key"] == judge.info["key"] and b["device"] == judge.info["name"]
    if not HAS_CUDA:  # the judge's CPU timing has no compile baseline, nor has the harness's
        assert b["compile_us"] is None and "CPU wall clock" in b["timing"]
    assert not measured["restart"] and set(measured["cache"]) >= {"fxgraph_cache_hit", "fxgraph_cache_miss"}


def test_supplied_baselines_are_used_and_nothing_is_timed_in_the_judge(judge, checkout, measured):
    from autokernel.kb.timing import SUPPLIED

    p = checkout[1]
    supplied = dict(measured["baselines"], eager_us=12345.0)  # no timing ever gives this value
    res = judge.evaluate(p, GOOD, baselines=supplied)
    assert res.outcome == "correct" and res.eager_us == 12345.0 and res.extra["baselines"] == SUPPLIED
    assert res.speedup_vs_eager == pytest.approx(12345.0 / res.latency_us)
    # without them the judge times its own, and the supplied run left nothing in its cache: it times now
    res = judge.evaluate(p, GOOD)
    assert res.outcome == "correct" and res.extra["baselines"] == "timed in this judgement"
    assert res.eager_us != 12345.0 and res.eager_us > 0
    again = judge.evaluate(p, GOOD)  # and keeps them for the next candidate, as before
    assert again.extra["baselines"] == "timed earlier in this judge process" and again.eager_us == res.eager_us


def test_supplied_baselines_rewritten_in_the_candidates_process_change_nothing(judge, checkout, measured):
    """The child holds the supplied numbers in the candidate's process; a candidate that finds them
    (up the stack) and inflates the eager time gains nothing: the speed-ups come from the parent's copy."""
    rewrite = solution("""
import sys
f = sys._getframe()
while f is not None:
    for v in list(f.f_locals.values()):
        if type(v) is dict and "eager_us" in v and "compile_mode" in v:
            v["eager_us"] = 1e12
    f = f.f_back
return kernel_fn(x.contiguous())
""")
    supplied = dict(measured["baselines"], eager_us=12345.0)
    res = judge.evaluate(checkout[1], rewrite, baselines=supplied)
    if res.outcome == "correct":
        assert res.eager_us == 12345.0 and res.speedup_vs_eager == pytest.approx(12345.0 / res.latency_us)
        assert not res.flagged or 12345.0 > 10 * res.latency_us
    else:  # or the judge saw its own state change: a cheat
        assert res.outcome == "cheat", (res.outcome, res.error)


def test_baselines_a_candidate_rewrites_in_the_judge_reach_no_later_result(judge, checkout):
    """The child keeps the baselines it timed for the next candidates; a candidate that rewrites that
    cache poisons nothing: the parent reports the numbers of the judgement that timed them."""
    p = checkout[1]
    first = judge.evaluate(p, GOOD)
    poison = solution("""
import sys
for entry in sys.modules["autokernel.kb.timing"]._baselines.values():
    entry["eager_us"] = 1e12
return kernel_fn(x.contiguous())
""")
    judge.evaluate(p, poison)
    res = judge.evaluate(p, GOOD)
    assert res.outcome == "correct" and res.extra["baselines"] == "timed earlier in this judge process"
    assert res.eager_us == first.eager_us < 1e11, (res.eager_us, first.eager_us)
    assert res.speedup_vs_eager == pytest.approx(first.eager_us / res.latency_us)


def test_baselines_a_candidate_plants_before_any_were_timed_are_a_cheat(checkout):
    """The first candidate of a fresh judge plants the baselines of every problem (the judge's cache
    replaced, before its timing): the parent knows no judgement timed them, so the result is a cheat
    and the next candidate meets a fresh child that times its own."""
    planted = solution("""
import sys
class Planted(dict):
    def __contains__(self, key):
        return True
    def __getitem__(self, key):
        return {"eager_us": 1e12, "compile_us": 1e12, "compile_error": None}
sys.modules["autokernel.kb.timing"]._baselines = Planted()
return kernel_fn(x.contiguous())
""")
    from autokernel.kb.evaluate import KBWorker

    with KBWorker() as fresh:
        res = fresh.evaluate(checkout[1], planted)
        assert res.outcome == "cheat" and "never timed" in res.error, (res.outcome, res.error)
        again = fresh.evaluate(checkout[1], GOOD)
        assert again.outcome == "correct" and again.extra["baselines"] == "timed in this judgement", again.extra
        assert again.eager_us < 1e11


@pytest.mark.parametrize("change, words", [({"device_key": "NVIDIA H200|sm9.0|torch2.9"}, "timed on"),
                                           ({"compile_mode": "max-autotune"}, "torch.compile mode"),
                                           ({"eager_us": None}, "no eager time")])
def test_supplied_baselines_of_another_device_or_mode_are_refused(judge, checkout, measured, change, words):
    from autokernel.kb.timing import SUPPLIED

    res = judge.evaluate(checkout[1], GOOD, baselines=dict(measured["baselines"], **change))
    assert res.outcome == "correct" and words in res.extra["baselines_refused"]
    assert res.extra["baselines"] != SUPPLIED and res.extra["baselines"].startswith("timed")


@pytest.fixture(scope="module")
def compiled(checkout, tmp_path_factory):
    """Four problems compiled by two processes into one cache: one crashes its process, one raises."""
    from autokernel.kb.baselines import compile_all

    cache = tmp_path_factory.mktemp("shared_cache")
    seen = []
    done = compile_all([checkout[3], checkout[1], checkout[4], checkout[5]], cache, 2,
                       on_done=lambda p, reply: seen.append(p.problem_id))
    return cache, done, seen


def test_parallel_compiles_share_one_cache_and_another_process_hits_it(compiled, checkout):
    from autokernel.kb.baselines import BaselineWorker

    cache, done, _ = compiled
    for pid in (1, 5):
        reply = done[checkout[pid].kernel_name]
        assert reply["compiled"] and reply["cache"]["fxgraph_cache_miss"] >= 1 and reply["cache"]["fxgraph_cache_hit"] == 0
    assert any((cache / "inductor" / "fxgraph").iterdir())  # both wrote into the one folder given
    with BaselineWorker(cache) as w:  # a new process: the graph comes from the cache
        again = w.compile(checkout[1])
    assert again["compiled"] and again["cache"]["fxgraph_cache_hit"] >= 1 and again["cache"]["fxgraph_cache_miss"] == 0


def test_a_failing_compile_is_recorded_and_the_others_go_on(compiled, checkout):
    _, done, seen = compiled
    assert sorted(seen) == [1, 3, 4, 5]  # every problem reported, each once
    assert done[checkout[3].kernel_name]["error"].startswith("died:")  # its process was killed by the problem
    assert "ValueError: no forward here" in done[checkout[4].kernel_name]["error"]
    assert done[checkout[1].kernel_name]["compiled"] and done[checkout[5].kernel_name]["compiled"]


class _Counting:
    """A BaselineWorker that counts the measurements asked of it (the real process does them)."""

    def __init__(self, cache):
        from autokernel.kb.baselines import BaselineWorker

        self.real = BaselineWorker(cache)
        self.asked: list[int] = []
        self.info = self.real.info

    def measure(self, p):
        self.asked.append(p.problem_id)
        return self.real.measure(p)


def test_baselines_phase_resumes_after_an_interruption(checkout, tmp_path):
    runner = _runner()
    probs = [checkout[1], checkout[2]]
    state: dict = {"problems": {}}
    saves = []

    def interrupted() -> None:  # the device call ends once the second problem's timing has begun
        saves.append(json.dumps(state))
        if len(saves) == 3:
            raise KeyboardInterrupt

    w = _Counting(tmp_path / "cache")
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.baselines_phase(probs, state, interrupted, cache_dir=tmp_path / "cache", workers=2,
                                   deadline_at=None, worker=w)
        state = json.loads(saves[-1])  # what the state file held
        first = state["problems"]["L1.1"]
        assert first["baselines_done"] and first["baselines"]["eager_us"] > 0
        assert state["problems"]["L1.2"]["baselines_tries"] == 1 and "baselines_done" not in state["problems"]["L1.2"]
        kept = dict(first["baselines"])
        said = runner.baselines_phase(probs, state, lambda: None, cache_dir=tmp_path / "cache", workers=2,
                                      deadline_at=None, worker=w)
        assert w.asked == [1, 2]  # the first problem was not timed again
        assert state["problems"]["L1.2"]["baselines_tries"] == 2
        assert state["problems"]["L1.1"]["baselines"] == kept and state["problems"]["L1.2"]["baselines"]["eager_us"] > 0
        assert said.startswith("baselines: 1 timed") and said.endswith("0 left for a later call")
        # started twice, never finished: given up (its judge times its own); a passed deadline starts nothing
        state["problems"]["L1.2"] = {"level": 1, "id": 2, "name": "x", "baselines_tries": 2}
        runner.baselines_phase(probs, state, lambda: None, cache_dir=tmp_path / "cache", workers=2,
                               deadline_at=None, worker=w)
        assert "twice" in state["problems"]["L1.2"]["baselines_error"] and w.asked == [1, 2]
        state["problems"].pop("L1.2")
        said = runner.baselines_phase(probs, state, lambda: None, cache_dir=tmp_path / "cache", workers=2,
                                      deadline_at=0.0, worker=w)
        assert "deadline came first (1 left" in said and "baselines" not in state["problems"]["L1.2"]
        # a problem already started is left to its judge's own baselines (one frame for its numbers)
        state["problems"]["L1.2"]["start_done"] = True
        assert runner.baselines_phase(probs, state, lambda: None, cache_dir=tmp_path / "cache", workers=2,
                                      deadline_at=None, worker=w) == "baselines: none needed"
    finally:
        w.real.close()


@pytest.mark.gpu
def test_gpu_compile_then_timing_hits_the_shared_cache(checkout, judge, tmp_path):
    """GPU: the baselines phase compiles in parallel, then times alone; the timing's torch.compile is a
    cache hit, both numbers are there, and the judge uses them."""
    if not HAS_CUDA:
        pytest.skip("needs a GPU")
    runner = _runner()
    probs = [checkout[1], checkout[5]]
    state: dict = {"problems": {}}
    said = runner.baselines_phase(probs, state, lambda: None, cache_dir=tmp_path / "cache", workers=2,
                                  deadline_at=None)
    assert said.startswith("baselines: 2 timed, 2 compiled, 0 failed"), said
    for key in ("L1.1", "L1.5"):
        e = state["problems"][key]
        b = e["baselines"]
        assert e["compile"]["cache"]["fxgraph_cache_miss"] >= 1
        assert b["eager_us"] > 0 and b["compile_us"] > 0 and b["compile_error"] is None
        assert b["cache"]["fxgraph_cache_hit"] >= 1 and b["cache"]["fxgraph_cache_miss"] == 0
    res = judge.evaluate(checkout[1], GOOD, baselines=state["problems"]["L1.1"]["baselines"])
    assert res.outcome == "correct" and res.gpu_timing, (res.outcome, res.error)
    assert res.eager_us == state["problems"]["L1.1"]["baselines"]["eager_us"]
    assert res.compile_us == state["problems"]["L1.1"]["baselines"]["compile_us"]


def test_the_timed_calls_checked_fit_the_device_memory():
    """An H100 (80 GB) ran out of memory in KernelBench L1 21 Sigmoid's timing: 4096 x 393216 fp32
    inputs and outputs of 6.4 GB, and five sampled calls each holding its output and a copy. The
    check keeps as many as fit beside the verdict's own pass of the reference (four on an H200's
    141 GB, one on the H100), never fewer than one; L1 91 cumsum_reverse (4.3 GB) then ran out with
    four on the H100, and gets three."""
    from autokernel.bench.across_calls import SAMPLES
    from autokernel.kb.timing import nbytes, samples_that_fit

    x = torch.empty(4096, 393)
    assert nbytes(x) == 4096 * 393 * 4 and nbytes([x, 3, x]) == 2 * nbytes(x) and nbytes(None) == 0
    six = 4096 * 393216 * 4
    assert samples_that_fit(int(79.2 * 2**30), six, six) == 1
    assert samples_that_fit(int(139.8 * 2**30), six, six) == 4
    cumsum = 32768 * 32768 * 4
    assert samples_that_fit(int(79.2 * 2**30), cumsum, cumsum) == 3
    assert samples_that_fit(int(139.8 * 2**30), cumsum, cumsum) == SAMPLES
    assert samples_that_fit(int(79.2 * 2**30), 1 << 20, 1 << 20) == SAMPLES  # the common case
    assert samples_that_fit(int(79.2 * 2**30), 4 * six, 4 * six) == 1  # whatever fits, at least one
