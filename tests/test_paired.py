"""The back-to-back pair of a near miss and the best (autokernel/paired.py): its statistics on
given timings, and on the CPU with the real bench worker (the screen's checked mode under the CPU
timing wrapper, as the loop calls it) and a real loop run, store and git."""

from __future__ import annotations

import json

import pytest

from autokernel import paired
from autokernel.kernelfile import parse_source, with_config
from autokernel.proposers.base import Proposal, SearchExhausted

from test_loop import SHAPES, TINY_REDUCE, add_tiny_kernel
from test_screening import Scripted


def test_a_steady_gain_is_faster_and_drift_alone_is_not():
    best = [100.0, 103.0, 99.0, 104.0, 100.5, 102.0]  # 5% of drift between rounds
    steady = [b * 0.993 * (1 + e) for b, e in zip(best, (0.001, -0.001, 0.0005, -0.0005, 0.0, 0.0008))]
    v = paired.decide(best, steady)
    assert v.faster and v.reason == "faster" and 0.992 < v.ratio < 0.994 and v.ratio < v.upper < 1.0
    # the same program: the ratios scatter around 1 however far the rounds drift
    same = [b * (1 + e) for b, e in zip(best, (0.002, -0.003, 0.001, -0.001, 0.002, -0.002))]
    v = paired.decide(best, same)
    assert not v.faster and v.reason == "not faster with 99% confidence" and v.upper > 1.0
    # steady but smaller than MIN_GAIN: believed, and still not worth a keep
    tiny = [b * 0.999 for b in best]
    v = paired.decide(best, tiny)
    assert not v.faster and v.upper < 1.0 and "less than 0.3%" in v.reason
    # a mean gain whose rounds disagree: one round the other way is enough to doubt 0.5%
    mixed = [b * r for b, r in zip(best, (0.99, 0.99, 1.01, 0.99, 0.99, 0.995))]
    assert not paired.decide(best, mixed).faster
    # what cannot be decided is said, never faster
    assert "rounds" in paired.decide([1.0], [0.5]).reason and not paired.decide([1.0], [0.5]).faster
    assert not paired.decide([1.0, 1.0], [0.0, 0.5]).faster


def test_compare_alternates_the_order_and_stops_at_a_failed_timing():
    calls: list[str] = []

    def once(source):
        calls.append(source)
        return (90.0 if source == "cand" else 100.0), None

    v = paired.compare(once, "best", "cand", rounds=4, shape={"n": 1})
    assert calls == ["best", "cand", "cand", "best", "best", "cand", "cand", "best"]
    assert v.faster and v.rounds == 4 and v.candidate_us == [90.0] * 4 and v.shape == {"n": 1}
    assert json.loads(json.dumps(v.to_dict()))["ratio"] == pytest.approx(0.9)
    assert "0.9000x the best" in v.line()

    def failing(source):
        return (None, "incorrect: wrong sums") if source == "cand" and len(calls) > 2 else (100.0, None)

    calls.clear()
    v = paired.compare(lambda s: (calls.append(s), failing(s))[1], "best", "cand", rounds=4)
    assert not v.faster and v.ratio is None
    assert v.reason == "the candidate's checked timing failed in round 2: incorrect: wrong sums"
    assert paired.near_miss(99.0, 100.0) and not paired.near_miss(99.8, 100.0) and not paired.near_miss(None, 100.0)


def test_a_cheap_pair_runs_more_rounds_and_a_dear_one_the_fewest():
    """The number of rounds comes from the first round's time (never from its ratio): as many as
    the budget allows, between the least and the most."""
    assert paired.rounds_for(0.3, 6, 12, 20.0) == 12 and paired.rounds_for(2.7, 6, 12, 20.0) == 7
    assert paired.rounds_for(10.0, 6, 12, 20.0) == 6 and paired.rounds_for(0.0, 6, 12, 20.0) == 12
    clock = [0.0]

    def once(source, pace):
        clock[0] += pace
        return (95.0 if source == "cand" else 100.0) * (1 + 0.001 * (len(calls) % 3)), None

    for pace, want in ((0.1, 12), (3.0, 6), (1.0, 10)):
        calls: list[str] = []
        fake = lambda s, pace=pace: (calls.append(s), once(s, pace))[1]  # noqa: E731
        v = paired.compare(fake, "best", "cand", rounds=6, most=12, budget_s=20.0, clock=lambda: clock[0])
        assert v.rounds == want and len(calls) == 2 * want and v.faster, (pace, v.rounds)


def _screen():
    from autokernel.bench.runner import BenchWorker
    from autokernel.cpu_timing import CPUTimedJudge

    worker = BenchWorker()
    return worker, CPUTimedJudge(worker.screen)


def _with(source: str, **cfg) -> str:
    return with_config(source, {**parse_source(source).config, **cfg})


def test_a_pair_on_the_cpu_tells_a_faster_kernel_from_the_same_one():
    """The loop's own timing for a pair: the worker's checked screen, CPU wall clock under the
    interpreter. The tiny kernel sleeps DELAY_MS at the timed shape, so its speed is set exactly."""
    worker, screen = _screen()

    def once(source):
        res = screen(source=source, kernel_type="reduce", shapes=SHAPES, weights=[1.0], dtype="float32",
                     timeout_s=120, checked=True)
        return (res.latency_us, None) if res.correct and res.latency_us else (None, res.error or res.outcome)

    try:
        # five rounds: a busy CI machine once timed one call of the best 15% slow, and three rounds'
        # bound (t = 6.97) did not hold a 25% gain under 1
        slow, fast = _with(TINY_REDUCE, DELAY_MS=60), _with(TINY_REDUCE, DELAY_MS=20)
        v = paired.compare(once, slow, fast, rounds=5)
        # (the interpreter's run of the kernel adds 5-25 ms to each call on this machine)
        assert v.faster and 0.3 < v.ratio < 0.8, v
        assert all(t > 20_000 for t in v.best_us + v.candidate_us)  # the sleep is in what was timed
        # the same program under another key (a comment): no gain beyond the machine's drift. On CI's
        # loaded 2-core machine one run timed the two 3.3% apart in all five rounds (ratio 0.967, bound
        # 0.997): CPU wall clock under load, which the alternating order did not cancel, so the gain
        # asked of a "faster" here is 5%, not the loop's 0.3% (on a GPU the same program never reaches
        # a pair: the screen's program digests stop it)
        v = paired.compare(once, slow, slow + "\n# the same kernel\n", rounds=5, min_gain=0.05)
        assert not v.faster and 0.8 < v.ratio < 1.25, v
        # a candidate whose sampled outputs are wrong fails its timing: never faster
        wrong = _with(TINY_REDUCE, DELAY_MS=0, VARIANT="off_by_one")
        v = paired.compare(once, slow, wrong, rounds=5)
        assert not v.faster and v.reason.startswith("the candidate's checked timing failed in round 1"), v
    finally:
        worker.close()


class ThenTheSame(Scripted):
    """The given configurations in order, then the current best again with one more module-level
    name: the same program under another key."""

    def propose(self, source, spec, history, last_result=None, *, kernel=None):
        if self.configs:
            return super().propose(source, spec, history, last_result, kernel=kernel)
        if "_THE_SAME_PROGRAM" in source:
            raise SearchExhausted("script done")
        return Proposal(source=source + "\n_THE_SAME_PROGRAM = 1\n", description="the best again",
                        config=parse_source(source).config)


def test_the_loop_keeps_a_near_miss_only_when_its_pair_finds_it_faster(home, monkeypatch):
    """With the keep rule's floor raised to 50% (the CPU's timings of one kernel move by several
    percent, and the interpreter adds 5-25 ms to each call of the tiny kernel), a candidate sleeping
    100 ms instead of 400 is an ordinary keep, one sleeping 65 instead of 100 (14-44% faster) is a
    near miss that its pair keeps, and the same program under another key is a near miss only by
    chance and then its pair says no. Rows say which; the branch holds the keeps. (The sleeps were
    80, 20 and 12 ms: on a busy 2-core CI machine the interpreter's share then swamped the 8 ms
    between the near miss and the best, and twice the near miss was not kept.)"""
    from autokernel import orchestrator
    from autokernel.loop import run_loop

    monkeypatch.setattr(orchestrator, "NOISE_FLOOR", 0.5)
    monkeypatch.setattr(paired, "ROUNDS", 5)
    monkeypatch.setattr(paired, "MAX_ROUNDS", 5)
    monkeypatch.setattr(paired, "ON_CPU", True)  # the loop pairs GPU timings only, unless told
    store, ws, k = add_tiny_kernel(home, _with(TINY_REDUCE, DELAY_MS=400))
    summary = run_loop(store, ws, model="tiny", hours=1, verify=False, timeout_s=120, margin=5.0,
                       proposer=ThenTheSame([{"DELAY_MS": 100}, {"DELAY_MS": 65}]), on_event=lambda e: None)
    big, near, same = [e for e in store.list_experiments(run_id=summary.run_id) if e.proposer != "baseline"]
    assert json.loads(big.config_json)["DELAY_MS"] == 100 and json.loads(near.config_json)["DELAY_MS"] == 65
    assert big.status == "kept" and big.paired_json is None  # over 50% faster: the keep rule itself
    assert near.paired_json, (near.status, near.latency_us, big.latency_us)
    v = json.loads(near.paired_json)
    assert near.status == "kept" and v["faster"] and v["rounds"] == 5 and 0.5 < v["ratio"] < 0.9, v
    assert json.loads(same.config_json) == json.loads(near.config_json) and same.candidate_key != near.candidate_key
    assert near.latency_us > big.latency_us * 0.5  # under the 50% floor: only the pair could keep it
    assert same.status == "reverted"
    if same.paired_json:  # a near miss by chance: its pair found no gain
        assert not json.loads(same.paired_json)["faster"]
    assert summary.kept == 2 and summary.paired_kept == 1 and summary.paired in (1, 2)
    assert parse_source(ws.read(k.name)).config["DELAY_MS"] == 65
