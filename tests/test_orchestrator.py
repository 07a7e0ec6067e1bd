"""Amdahl scheduling: the formula, the choice, plateaus, revisits, and state rebuilt from a real store."""

from __future__ import annotations

import pytest

from autokernel.amdahl import kernel_speedup, model_speedup
from autokernel.orchestrator import Orchestrator, beats, keep_threshold_us, run_elapsed_s
from autokernel.store import Store


def test_model_speedup_is_amdahl():
    assert model_speedup([]) == 1.0
    assert model_speedup([(0.5, 2.0)]) == pytest.approx(1 / (1 - 0.5 * 0.5))  # 1.333
    assert model_speedup([(0.5, 2.0), (0.3, 1.5)]) == pytest.approx(1 / (1 - 0.25 - 0.1))
    assert model_speedup([(0.4, 0.5)]) == pytest.approx(1 / 1.4)  # a slower kernel slows the model
    assert model_speedup([(0.7, 2.0), (0.6, 2.0)]) == pytest.approx(1 / (1 - 0.5))  # shares clipped at 1


def test_kernel_speedup_prefers_eager_then_the_start():
    assert kernel_speedup(1.7, 100.0, 50.0) == 1.7  # timed against eager (a GPU run)
    assert kernel_speedup(None, 100.0, 80.0) == pytest.approx(1.25)  # the interpreter: vs its start
    assert kernel_speedup(None, None, 80.0) == 1.0 and kernel_speedup(None, 100.0, None) == 1.0


@pytest.fixture
def store(home):
    s = Store(home.db)
    yield s
    s.close()


def _kernels(store, shares):
    return [store.add_kernel(f"m.{t}", t, model="m", share=f) for t, f in shares]


def _exp(store, run, k, status, latency=None, pct=None, duration=1.0, config=None):
    return store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type=k.kernel_type, status=status,
                                latency_us=latency, latency_iqr_us=0.1 if latency else None, pct_peak=pct,
                                duration_s=duration, config_json=config or "{}",
                                proposer="baseline" if status == "baseline" else "search")


def test_keep_rule_wants_the_middle_halves_apart_and_the_floor():
    # the H200 case: a start timed with a 6.2% IQR, a candidate 4.6% faster with a 3.2% IQR
    assert beats(899.6, 28.6, 943.28, 58.24)
    assert not beats(900.0, 30.0, 943.28, 58.24)  # 43.3 us faster, half the IQRs 44.1 us: overlapping
    assert not beats(991.0, 0.0, 1000.0, 0.0)  # 0.9% faster, no spread: under the 1% floor
    assert beats(989.0, 0.0, 1000.0, 0.0)
    assert beats(5.0, 100.0, None, None)  # nothing to beat yet
    assert keep_threshold_us(1000.0, 40.0) == 980.0 and keep_threshold_us(1000.0, 4.0) == 990.0
    # H100 run 6: matmul's start timed with a weighted IQR of 8601 us (67% of 12816 us), its
    # candidates with 130-160 us. BLOCK_M=128 at -2.5% is kept (the start's spread counts twice the
    # candidate's at most); one 0.5% faster is still under the floor, and a noisy candidate does not
    # lift the cap past the start's own spread
    assert beats(12494.7, 156.75, 12816.26, 8601.1)
    assert not beats(12752.0, 156.75, 12816.26, 8601.1)
    assert not beats(12494.7, 9000.0, 12816.26, 8601.1)


def test_picks_largest_expected_gain_then_moves_on_from_a_plateau(store):
    run = store.create_run("loop", model="m")
    big, small = _kernels(store, [("matmul", 0.6), ("softmax", 0.1)])
    _exp(store, run, big, "baseline", 100.0, pct=40.0)
    _exp(store, run, small, "baseline", 50.0, pct=40.0)
    orch = Orchestrator.from_store(store, run.id, [big, small], plateau_after=3)
    assert orch.pick().kernel_id == big.id
    for _ in range(3):
        orch.record(_exp(store, run, big, "reverted", 101.0))
    assert orch.plateaued(orch.states[big.id])
    assert orch.pick().kernel_id == small.id
    for _ in range(3):
        orch.record(_exp(store, run, small, "incorrect"))
    # both plateaued: revisit the most promising one, with a fresh patience counter
    st = orch.pick()
    assert st.kernel_id == big.id and st.revisits == 1 and st.since_improvement == 0
    orch.mark_exhausted(big.id)
    orch.mark_exhausted(small.id)
    assert orch.pick() is None


def test_headroom_and_success_rate_shape_the_gain(store):
    run = store.create_run("loop", model="m")
    near, far = _kernels(store, [("rmsnorm", 0.3), ("layernorm", 0.3)])
    _exp(store, run, near, "baseline", 10.0, pct=90.0)
    _exp(store, run, far, "baseline", 10.0, pct=30.0)
    orch = Orchestrator.from_store(store, run.id, [near, far])
    assert orch.expected_gain(orch.states[far.id]) > orch.expected_gain(orch.states[near.id]) > 0
    assert orch.pick().kernel_id == far.id
    # a kernel at its roofline plateaus after half the patience (it still gets its first moves:
    # a GEMM's ceiling is a cuBLAS matmul, which it can pass)
    orch.record(_exp(store, run, near, "kept", 8.0, pct=97.0))
    assert not orch.plateaued(orch.states[near.id])
    for _ in range(orch.plateau_after // 2):
        orch.record(_exp(store, run, near, "reverted", 8.5, pct=97.0))
    assert orch.plateaued(orch.states[near.id])
    # failures lower the success rate and with it the expected gain
    before = orch.expected_gain(orch.states[far.id])
    for _ in range(4):
        orch.record(_exp(store, run, far, "crashed"))
    assert orch.expected_gain(orch.states[far.id]) < before


def test_state_and_time_rebuilt_from_the_store_match(store):
    run = store.create_run("loop", model="m")
    (k,) = _kernels(store, [("softmax", 0.5)])
    _exp(store, run, k, "baseline", 100.0, duration=4.0)
    _exp(store, run, k, "kept", 50.0, duration=2.0)
    _exp(store, run, k, "reverted", 60.0, duration=3.0)
    _exp(store, run, k, "abandoned", duration=None)
    orch = Orchestrator.from_store(store, run.id, [k])
    st = orch.states[k.id]
    assert (st.attempts, st.kept, st.since_improvement) == (2, 1, 1)  # abandoned is no attempt
    assert st.best_us == 50.0 and st.baseline_us == 100.0 and st.speedup == pytest.approx(2.0)
    assert orch.predicted_speedup() == pytest.approx(1 / (1 - 0.5 * 0.5))
    assert orch.total_time_s() == pytest.approx(9.0)
    # the abandoned row counts the median duration (3 s): its own end time is unknown
    assert run_elapsed_s(store, run.id) == pytest.approx(9.0 + 3.0)


def test_a_judgement_is_limited_by_the_kernels_longest_one_so_far(store):
    """A hang costs HANG_FACTOR times the longest full judgement, not the whole --timeout; screens,
    failures and timeouts do not raise the limit, and none is cut under MIN_JUDGEMENT_S."""
    from autokernel.orchestrator import HANG_FACTOR, MIN_JUDGEMENT_S

    run = store.create_run("loop", model="m")
    a, b = _kernels(store, [("matmul", 0.5), ("rmsnorm", 0.1)])
    assert Orchestrator.from_store(store, run.id, [a, b]).judgement_limit(a.id, 600.0) == 600.0  # nothing ended yet
    _exp(store, run, a, "baseline", 100.0, duration=45.0)
    _exp(store, run, a, "reverted", 110.0, duration=20.0)
    _exp(store, run, a, "screened", 400.0, duration=300.0)  # a slow screen is not a judgement
    _exp(store, run, a, "timeout", None, duration=600.0)  # nor is a hang
    _exp(store, run, b, "baseline", 10.0, duration=5.0)
    orch = Orchestrator.from_store(store, run.id, [a, b])
    assert orch.judgement_limit(a.id, 600.0) == pytest.approx(HANG_FACTOR * 45.0) == 180.0
    assert orch.judgement_limit(a.id, 150.0) == 150.0  # the user's --timeout still bounds it
    assert orch.judgement_limit(b.id, 600.0) == MIN_JUDGEMENT_S
    _exp(store, run, b, "kept", 9.0, duration=70.0)
    orch = Orchestrator.from_store(store, run.id, [a, b])
    assert orch.judgement_limit(b.id, 600.0) == pytest.approx(280.0)


def test_a_run_resumed_on_another_card_compares_with_the_best_timed_there(store):
    """H100 rows, then the run resumed on an H200 (or back): a candidate must beat the best as
    timed on this card, whichever way the card's speed went, and the loop knows which kernels
    need that timing (loop_run.baselines_due)."""
    from autokernel.loop_run import baselines_due

    run = store.create_run("loop", model="m")
    k, k2, k3 = _kernels(store, [("softmax", 0.5), ("rmsnorm", 0.3), ("rotary_embedding", 0.2)])
    for kk in (k, k2):
        store.update_experiment(_exp(store, run, kk, "baseline", 100.0).id, device="H100")
    store.update_experiment(_exp(store, run, k, "kept", 90.0).id, device="H100")
    rows = store.list_experiments(run_id=run.id)
    assert baselines_due(rows, [k.id, k2.id, k3.id], "H100") == {k3.id: None}
    assert baselines_due(rows, [k.id, k2.id, k3.id], None) == {k3.id: None}  # device unknown: as before
    assert baselines_due(rows, [k.id, k2.id, k3.id], "H200") == {k.id: "H100", k2.id: "H100", k3.id: None}
    # the best so far (90 us on the H100) timed again on a slower card: 95 us is what to beat now
    store.update_experiment(_exp(store, run, k, "baseline", 95.0).id, device="H200")
    # ... and on a faster one, the start of k2: 70 us
    store.update_experiment(_exp(store, run, k2, "baseline", 70.0).id, device="H200")
    rows = store.list_experiments(run_id=run.id)
    assert baselines_due(rows, [k.id, k2.id], "H200") == {}
    orch = Orchestrator.from_store(store, run.id, [k, k2])
    st, st2 = orch.states[k.id], orch.states[k2.id]
    assert (st.best_us, st.baseline_us, st.device, st.kept) == (95.0, 95.0, "H200", 1)
    assert (st2.best_us, st2.device) == (70.0, "H200")
    # on the same card a second start is only the best when it is faster (the old rule)
    store.update_experiment(_exp(store, run, k, "baseline", 99.0).id, device="H200")
    assert Orchestrator.from_store(store, run.id, [k]).states[k.id].best_us == 95.0


def test_a_best_kept_on_another_card_is_timed_again_even_where_the_start_was_timed(store):
    """Run 9: starts on an H100, a keep on an H200, resumed on an H100. The best the third call had
    to beat was the H200's keep, so it is due again though every start row names the H100; a
    reverted row from the other card sets no best and makes nothing due. A start timed elsewhere
    makes its kernel due too: the library timings a candidate is compared with are the start's."""
    from autokernel.loop_run import baselines_due

    run = store.create_run("loop", model="m")
    k, k2 = _kernels(store, [("matmul", 0.5), ("rmsnorm", 0.3)])
    for kk in (k, k2):
        store.update_experiment(_exp(store, run, kk, "baseline", 100.0).id, device="H100")
    store.update_experiment(_exp(store, run, k, "kept", 90.0).id, device="H200")
    store.update_experiment(_exp(store, run, k2, "reverted", 80.0).id, device="H200")
    rows = store.list_experiments(run_id=run.id)
    assert baselines_due(rows, [k.id, k2.id], "H100") == {k.id: "H200"}
    # on the H200 both are due: k's best is that card's, but its library timings (the start's) are not
    assert baselines_due(rows, [k.id, k2.id], "H200") == {k.id: "H100", k2.id: "H100"}
    assert Orchestrator.from_store(store, run.id, [k]).states[k.id].device == "H200"
    # timed again on the H100 (slower there): that is the best now, and nothing is due on the H100
    store.update_experiment(_exp(store, run, k, "baseline", 97.0).id, device="H100")
    rows = store.list_experiments(run_id=run.id)
    assert baselines_due(rows, [k.id, k2.id], "H100") == {}
    st = Orchestrator.from_store(store, run.id, [k]).states[k.id]
    assert (st.best_us, st.device, st.kept) == (97.0, "H100", 1)


def _gpu_row(store, run, k, status, latency, library_us, shapes, duration=2.0, mode="compile", pct_peak=None):
    """A row as a GPU run writes it: per-shape timings, the library's eager and compile times."""
    import json

    per = [{"shape": s, "weight": w, "dtype": "bfloat16", "latency_us": latency * w0, "wall_us": latency * w0,
            "eager_us": library_us * w0 * 1.1, "eager_wall_us": library_us * w0 * 1.1,
            "compile_us": library_us * w0} for s, w, w0 in shapes]
    lat = sum(r["weight"] * r["latency_us"] for r in per)
    eager = sum(r["weight"] * r["eager_us"] for r in per)
    return store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type=k.kernel_type, status=status,
                                latency_us=lat, latency_iqr_us=0.01 * lat, duration_s=duration,
                                speedup_vs_eager=eager / lat, details_json=json.dumps(per), pct_peak=pct_peak,
                                proposer="baseline" if status == "baseline" else "search")


def test_chooses_by_realized_model_gain_not_by_share(store):
    """Issue 18: a kernel behind the library saves the model nothing, whatever its share; one that
    beats torch.compile's op at the model's shapes is worth an experiment first."""
    run = store.create_run("loop", model="m")
    small, big = _kernels(store, [("rmsnorm", 0.05), ("fused_mlp", 0.6)])
    shapes = [({"rows": 2048, "cols": 4096}, 64, 1.0)]
    _gpu_row(store, run, small, "baseline", 80.0, 100.0, shapes)  # 1.25x compile's op
    _gpu_row(store, run, big, "baseline", 115.0, 100.0, shapes)  # 0.87x compile's op
    orch = Orchestrator.from_store(store, run.id, [small, big])
    s, b = orch.states[small.id], orch.states[big.id]
    assert orch.value(b).realized == 0.0 and orch.value(b).expected == 0.0
    assert orch.value(s).realized == pytest.approx(0.05 * 20 / 110)  # share x saved / eager op time
    assert orch.pick().kernel_id == small.id
    assert "1.25x the library" in orch.reason
    # the model's predicted speed-up counts only what crosses: the big kernel adds nothing
    assert orch.predicted_speedup() == pytest.approx(1 / (1 - 0.05 * 20 / 110))
    # in eager mode the library's time is eager's (1.1x compile's here): the big kernel is 0.96x,
    # one keep from crossing, so its next experiment is worth more than the small one's
    eager = Orchestrator.from_store(store, run.id, [small, big], target_mode="eager")
    v = eager.value(eager.states[big.id])
    assert v.realized == 0.0 and v.vs_library == pytest.approx(110 / 115)
    assert v.expected == pytest.approx(0.5 * 0.6 * (110 - 0.9 * 115) / 110)
    assert eager.pick().kernel_id == big.id
    # the small kernel plateaus: the big one, close behind (0.87x) and without a trend yet, is
    # explored before a revisit; once its failures end that, the small one is revisited
    for _ in range(orch.plateau_after):
        orch.record(_gpu_row(store, run, small, "reverted", 85.0, 100.0, shapes))
    assert orch.pick().kernel_id == big.id and "investing to explore" in orch.reason
    while (st := orch.pick()).kernel_id == big.id:
        orch.record(_gpu_row(store, run, big, "reverted", 116.0, 100.0, shapes))
    assert 1 <= b.attempts <= 4 and st.kernel_id == small.id and "revisited" in orch.reason
    assert s.revisits == 1


def test_invests_behind_the_library_only_when_its_own_trend_crosses(store):
    run = store.create_run("loop", model="m")
    small, big = _kernels(store, [("rmsnorm", 0.05), ("fused_mlp", 0.6)])
    shapes = [({"rows": 2048, "cols": 4096}, 64, 1.0)]
    _gpu_row(store, run, small, "baseline", 95.0, 100.0, shapes)
    _gpu_row(store, run, big, "baseline", 140.0, 100.0, shapes, pct_peak=85.0)  # 0.71x, near its roofline
    orch = Orchestrator.from_store(store, run.id, [small, big])
    assert not orch.value(orch.states[big.id]).invest  # no history of its own, too far to explore
    assert orch.pick().kernel_id == small.id
    # two keeps in a row, 10% each: 140 -> 113 us, still behind (one more keep would not cross), but
    # its trend crosses in a few experiments
    for lat in (126.0, 113.4):
        orch.record(_gpu_row(store, run, big, "kept", lat, 100.0, shapes))
    v = orch.value(orch.states[big.id])
    assert v.realized == 0.0 and v.invest and v.crosses_in <= 3
    assert orch.pick().kernel_id == big.id and "investing" in orch.reason
    # its trend breaks: failures lower the learned probability until it is no longer worth it
    for _ in range(16):
        orch.record(_gpu_row(store, run, big, "screened", 150.0, 100.0, shapes, duration=0.5))
    assert not orch.value(orch.states[big.id]).invest
    assert orch.pick().kernel_id == small.id


def test_explores_a_kernel_close_behind_the_library_until_its_failures_say_stop(store):
    """Issue 18 on an H100: rotary at 0.89x torch.compile got no experiment in 10 minutes while
    matmul, plateaued, was revisited. A kernel whose prior crosses within HORIZON is tried from its
    prior for its first experiments once the kernels worth something plateau; its failures end
    that, and a far one (near its roofline, so small steps) is never explored."""
    from autokernel import objective

    run = store.create_run("loop", model="m")
    lead, close, far = _kernels(store, [("matmul", 0.2), ("rotary_embedding", 0.14), ("fused_mlp", 0.43)])
    shapes = [({"rows": 2048, "cols": 4096}, 64, 1.0)]
    _gpu_row(store, run, lead, "baseline", 98.0, 100.0, shapes, duration=5.0)  # 1.02x: worth a little
    _gpu_row(store, run, close, "baseline", 112.0, 100.0, shapes)  # 0.89x
    _gpu_row(store, run, far, "baseline", 125.0, 100.0, shapes, pct_peak=85.0)  # 0.80x with 2-3% steps
    orch = Orchestrator.from_store(store, run.id, [lead, close, far], plateau_after=3)
    v = orch.value(orch.states[close.id])
    assert v.realized == 0.0 and v.invest and v.explore and v.crosses_in <= objective.HORIZON
    assert not orch.value(orch.states[far.id]).invest
    assert orch.pick().kernel_id == lead.id  # realized gain first
    for _ in range(3):
        orch.record(_gpu_row(store, run, lead, "reverted", 99.0, 100.0, shapes))
    assert orch.pick().kernel_id == close.id and "investing to explore" in orch.reason
    assert "experiment 1 of its first 4" in orch.reason
    tried = 0
    while (st := orch.pick()).kernel_id == close.id:
        orch.record(_gpu_row(store, run, close, "reverted", 113.0, 100.0, shapes))
        tried += 1
        assert tried <= objective.EXPLORE_ATTEMPTS
    assert tried >= 1 and st.kernel_id == lead.id and "revisited" in orch.reason
    assert orch.states[far.id].attempts == 0  # never explored: too far behind
    # a keep that crosses makes it worth its one-step value like any kernel ahead of the library
    orch.record(_gpu_row(store, run, close, "kept", 95.0, 100.0, shapes))
    v = orch.value(orch.states[close.id])
    assert v.realized > 0 and not v.invest and v.value > 0


def test_explores_a_kernel_far_behind_the_library_when_far_below_its_roofline(store):
    """Issue 18, H100 run 4: attention at 0.77x cuDNN and 38% of its roofline got no experiment in
    16 minutes, and H100 run 5's (0.776x, 40% of its roofline: its prior crossed in 6) none in 7.
    Its prior step (headroom-scaled) crosses within HORIZON, so it is explored; the same gap at 90% of
    the roofline (2% steps, a dozen keeps to cross) is not."""
    from autokernel import objective

    run = store.create_run("loop", model="m")
    lead, low, high = _kernels(store, [("matmul", 0.2), ("flash_attention", 0.05), ("rmsnorm", 0.05)])
    shapes = [({"rows": 2048, "cols": 4096}, 32, 1.0)]
    _gpu_row(store, run, lead, "baseline", 98.0, 100.0, shapes, duration=5.0)
    _gpu_row(store, run, low, "baseline", 129.0, 100.0, shapes, pct_peak=38.0)  # 0.775x
    _gpu_row(store, run, high, "baseline", 129.0, 100.0, shapes, pct_peak=90.0)
    orch = Orchestrator.from_store(store, run.id, [lead, low, high], plateau_after=3)
    v = orch.value(orch.states[low.id])
    assert v.vs_library < 0.8 and v.explore and v.crosses_in <= objective.HORIZON
    w = orch.value(orch.states[high.id])
    assert not w.invest and w.crosses_in > objective.HORIZON
    for _ in range(3):
        orch.record(_gpu_row(store, run, lead, "reverted", 99.0, 100.0, shapes))
    assert orch.pick().kernel_id == low.id and "investing to explore" in orch.reason
    while orch.pick().kernel_id == low.id:
        orch.record(_gpu_row(store, run, low, "reverted", 130.0, 100.0, shapes, pct_peak=38.0))
    assert 1 <= orch.states[low.id].attempts <= objective.EXPLORE_ATTEMPTS
    assert orch.states[high.id].attempts == 0


def test_a_kernel_at_its_measured_ceiling_is_still_tried_and_a_long_failing_one_yields(store):
    """Issue 18, H100 run 5: matmul at 98% of its ceiling (a cuBLAS matmul, which a kernel can
    pass) and 1.01x the library was plateaued before its first experiment and never tried, while
    fused_mlp, 130 failures deep after one keep, still took every experiment: p's memory (0.85 over
    10) floored at 14%. Now a kernel at its ceiling gets half the patience and a 2% prior step, and a
    long stretch of failures brings p down to the run's rate (H100 run 11: 0.93 over 30 floored at
    7%, and fused_mlp took 297 experiments in a row): the other kernel is picked again."""
    from autokernel import objective

    run = store.create_run("loop", model="m")
    mlp, mm = _kernels(store, [("fused_mlp", 0.44), ("matmul", 0.21)])
    shapes = [({"rows": 2048, "cols": 4096}, 32, 1.0), ({"rows": 2048, "cols": 11008}, 32, 1.0)]
    _gpu_row(store, run, mlp, "baseline", 95.0, 100.0, shapes, pct_peak=98.0)  # 1.05x
    mm_shapes = [({"rows": 2048, "cols": 4096}, 96, 1.0), ({"rows": 2048, "cols": 4096}, 1, 1.05)]
    _gpu_row(store, run, mm, "baseline", 99.0, 100.0, mm_shapes, pct_peak=97.7)
    orch = Orchestrator.from_store(store, run.id, [mlp, mm])
    v = orch.value(orch.states[mm.id])
    assert v.step == pytest.approx(objective.PRIOR_MIN_STEP) and v.value > 0
    assert not orch.plateaued(orch.states[mm.id])
    assert orch.pick().kernel_id == mlp.id
    orch.record(_gpu_row(store, run, mlp, "kept", 93.0, 100.0, shapes, pct_peak=98.0))
    picks = []
    for _ in range(orch.plateau_after):
        st = orch.pick()
        picks.append(st.kernel_id)
        if st.kernel_id == mm.id:
            break
        orch.record(_gpu_row(store, run, mlp, "screened", 99.0, 100.0, shapes, duration=1.0, pct_peak=98.0))
    assert picks[-1] == mm.id and len(picks) == orch.plateau_after // 2 + 1
    # a long stretch of failures: p is the run's rate, under the decayed memory's floor (~7%)
    floor = 1 / (2 + (1 - objective.DECAY ** objective.WINDOW) / (1 - objective.DECAY))
    for _ in range(130):
        orch.record(_gpu_row(store, run, mlp, "screened", 99.0, 100.0, shapes, duration=1.0, pct_peak=98.0))
    st = orch.states[mlp.id]
    assert objective.success_probability(st.recent) == pytest.approx(floor)
    assert st.kept == 1 and st.attempts == 1 + orch.plateau_after // 2 + 130
    assert orch.success_rate(st) == pytest.approx(2 / (2 + st.attempts)) and orch.success_rate(st) < floor / 4
    # ... so the kernel a screen turns away in a second no longer outbids the other for ever
    picks = [orch.pick().kernel_id for _ in range(3)]
    assert mm.id in picks, picks
