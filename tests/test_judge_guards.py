"""The judges' anti-cheat building blocks in-process (fast; no worker): the integrity snapshot, the
output ledger, the library-share meter, the KernelBench reference guard, and the kernel file's
DETERMINISTIC rule."""

from __future__ import annotations

import textwrap

import pytest
import torch

from autokernel.bench.checks import CheckFailure


@pytest.fixture
def snapshot():
    from autokernel.bench.integrity import judge_snapshot
    from autokernel.kernels import KERNEL_TYPES, get_spec

    snap = judge_snapshot(specs=[get_spec(t) for t in KERNEL_TYPES])
    assert snap.changed() is None
    return snap


def test_integrity_names_each_kind_of_change_and_forgives_nothing_else(snapshot, monkeypatch):
    import autokernel.bench.checks as checks
    import autokernel.kernels.reduce as reduce_mod

    spec = reduce_mod.SPEC
    cases = [
        (lambda: monkeypatch.setattr(checks, "compare", lambda *a, **k: (0.0, 0.0)), "autokernel.bench.checks.compare"),
        (lambda: monkeypatch.setattr(checks, "bool", lambda x: False, raising=False),
         "autokernel.bench.checks (a new attribute 'bool')"),
        (lambda: monkeypatch.setattr(reduce_mod.reference, "__code__", (lambda x: x).__code__),
         "autokernel.kernels.reduce.reference (its code)"),
        (lambda: monkeypatch.setattr(spec, "reference", lambda x: x), "spec reduce.reference"),
        (lambda: monkeypatch.setitem(spec.tolerances, "float32", (1.0, 1.0)), "spec reduce.tolerances (its contents)"),
        (lambda: monkeypatch.setattr(torch.Tensor, "sum", lambda *a, **k: None, raising=False),
         "torch.Tensor (a new attribute 'sum')"),
        (lambda: monkeypatch.setattr(torch.cuda, "Event", type("E", (), {})), "torch.cuda.Event"),
        (lambda: monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda *a: 0.0),
         "torch.cuda.Event.elapsed_time"),
        (lambda: monkeypatch.setattr("builtins.max", lambda *a, **k: 0), "builtins.max"),
    ]
    for patch, label in cases:
        patch()
        assert snapshot.changed() == label
        monkeypatch.undo()
        assert snapshot.changed() is None, label


@pytest.mark.filterwarnings("ignore:Warning only once")
def test_integrity_sees_a_python_kernel_for_an_aten_op(snapshot):
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("relu", lambda x: torch.zeros_like(x), "CPU")
        assert snapshot.changed() == "torch.library registrations (a Python kernel for an aten op)"
    finally:
        lib._destroy()
    assert snapshot.changed() is None
    assert torch.relu(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]  # the real kernel is back


def test_integrity_takes_a_warning_issued_in_a_watched_module_as_no_change(snapshot):
    """A warning attributed to a module records itself there (__warningregistry__): L3 28's Model
    builds nn.TransformerEncoder, which warns from the problem's module."""
    import warnings

    import autokernel.bench.checks as checks

    assert "__warningregistry__" not in vars(checks)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        exec(compile("import warnings\nwarnings.warn('nested tensors off', UserWarning)", "<problem>", "exec"),
             vars(checks))
    try:
        assert "__warningregistry__" in vars(checks) and snapshot.changed() is None
        checks.__dict__["extra_flag"] = 1  # any other new name is still seen
        assert snapshot.changed() == "autokernel.bench.checks (a new attribute 'extra_flag')"
    finally:
        vars(checks).pop("extra_flag", None)
        vars(checks).pop("__warningregistry__", None)
    assert snapshot.changed() is None


def test_integrity_takes_torch_dynamo_wrapping_manual_seed_as_no_change(snapshot):
    import torch._dynamo  # noqa: F401  (rebinds torch.manual_seed to a disable-dynamo wrapper of it)

    assert snapshot.changed() is None


def test_ledger_refuses_a_reused_buffer_and_an_overwritten_output():
    from autokernel.bench.across_calls import OutputLedger

    ledger = OutputLedger()
    buf = torch.zeros(9)
    first = buf[1:5]
    ledger.accept("call 1", [first])
    with pytest.raises(CheckFailure, match="reuses the memory of an output it returned before"):
        ledger.recheck([buf[5:]])
    ledger.recheck([torch.ones(4)])  # fresh memory is fine
    buf[2] = 7.0
    with pytest.raises(CheckFailure, match="call 1 changed after a later call"):
        ledger.recheck([torch.ones(4)])
    nan = torch.full((3,), float("nan"))
    ledger = OutputLedger()
    ledger.accept("nan", [nan])
    ledger.recheck([])  # NaN == NaN bytewise: unchanged


def test_ledger_checks_outputs_over_the_copy_limit_by_random_bytes(monkeypatch):
    """An output too large to copy whole (KEEP_BYTES) is held, and SAMPLE_BYTES random bytes of it are
    copied: a persistent buffer that the next call overwrites is caught as for a small one (the
    H200 judged the KernelBench persistent_buffer cheat correct at 256 MiB before this)."""
    from autokernel.bench import across_calls

    monkeypatch.setattr(across_calls, "KEEP_BYTES", 64)
    monkeypatch.setattr(across_calls, "SAMPLE_BYTES", 32)
    ledger = across_calls.OutputLedger()
    buf = torch.randn(1 + 1000)
    first = buf[1:]
    ledger.accept("trial 1", [first])
    assert ledger._kept[0][2].numel() == 32  # positions, not a whole copy
    with pytest.raises(CheckFailure, match="reuses the memory of an output it returned before"):
        ledger.recheck([buf[1:]])
    ledger.recheck([torch.randn(1000)])
    buf.copy_(torch.randn(1001))  # what the next call into the same buffer does
    with pytest.raises(CheckFailure, match="trial 1 changed after a later call"):
        ledger.recheck([torch.randn(1000)])
    # the cap on what is held: the oldest large outputs are let go
    monkeypatch.setattr(across_calls, "LARGE_HELD_BYTES", 2 * 4000)
    ledger = across_calls.OutputLedger()
    for i in range(3):
        ledger.accept(f"trial {i + 1}", [torch.randn(1000)])
    assert [k[0] for k in ledger._kept] == ["trial 2", "trial 3"]


def test_library_work_is_counted_however_the_op_is_reached():
    import importlib

    from autokernel.bench.share import TorchWork, WorkMeter, cpu_share, share_reason

    x = torch.randn(8, 16)
    meter = WorkMeter()
    with TorchWork(meter):
        torch.ops.aten.sum.dim_IntList(x, [-1])
        getattr(importlib.import_module("torch"), "sum")(x, -1)
        x.sum(-1)
        x.view(16, 8).t()  # views and allocations are free
        torch.empty(100)
    assert meter.foreign == {"sum": 3 * (128 + 8)}
    meter.own = 3 * (128 + 8) / 9  # its own kernels did a tenth of the work
    share, what = cpu_share(meter)
    assert share == pytest.approx(0.9) and "torch sum 90%" in what
    assert "did 90% of its work" in share_reason(share, what, on_gpu=False)
    assert share_reason(share, what, on_gpu=False, max_share=0.95) is None
    with TorchWork(meter):
        x @ x.t()  # a matmul counts its multiply-accumulates
    assert meter.foreign["matmul"] == 8 * 8 * 16


PROBLEM = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            """Doubles x."""
            return x * 2
''')


def test_reference_guard_sees_the_problems_forward_by_its_code():
    from autokernel.kb.guards import ReferenceGuard

    prob, copy = {}, {}
    exec(compile(PROBLEM, "problem.py", "exec"), prob)
    exec(compile(PROBLEM.replace('"""Doubles x."""', "") + textwrap.dedent('''
        class ModelNew(Model):
            def forward(self, x):
                return super().forward(x) + 0


        class Honest(Model):
            def forward(self, x):
                return x + x
    '''), "solution.py", "exec"), copy)
    x = torch.ones(3)
    for cls, hit in ((copy["ModelNew"], True), (copy["Honest"], False), (prob["Model"], True)):
        guard = ReferenceGuard(prob["Model"])
        with guard:
            cls()(x)
        assert (guard.reason() is not None) == hit, cls
    guard = ReferenceGuard(prob["Model"])
    with guard:
        import sys

        sys.setprofile(None)
    assert "switched off" in guard.reason()


def test_deterministic_false_needs_a_reason():
    from autokernel.errors import KernelFileError
    from autokernel.kernelfile import parse_source

    src = 'KERNEL_TYPE = "reduce"\nBACKEND = "triton"\nDETERMINISTIC = False\n\ndef kernel_fn(x):\n    return x\n'
    with pytest.raises(KernelFileError, match="NONDETERMINISM_REASON"):
        parse_source(src)
    kf = parse_source(src + 'NONDETERMINISM_REASON = "atomic adds"\n')
    assert not kf.deterministic and kf.nondeterminism_reason == "atomic adds"
    assert parse_source(src.replace("False", "True")).deterministic


def _session(kernels, warm=False, span=None, marks=()):
    """A profiled call as launches.record_gpu records it: back-to-back kernels from t = 0 when given
    as (name, microseconds), or (name, start, end)."""
    from autokernel.bench.launches import GpuSession

    t, intervals = 0.0, []
    for k in kernels:
        if len(k) == 2:
            intervals.append((k[0], t, t + k[1]))
            t += k[1]
        else:
            intervals.append(k)
    end = max([e for _n, _s, e in intervals] + [t])
    return GpuSession(intervals, span or (0.0, end), warm, list(marks))


def test_gpu_share_weighs_kernel_time_and_ignores_fills():
    from autokernel.bench.launches import is_foreign
    from autokernel.bench.share import gpu_share, share_reason

    pats = ("at::native::reduce_kernel",)
    kernels = [("_row_sum", 10.0), ("void at::native::reduce_kernel<512, 1>(...)", 30.0),
               ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(...)", 500.0),
               ("Memcpy DtoD (Device -> Device)", 100.0)]
    share, what = gpu_share([_session(kernels, warm=True)], lambda n: is_foreign(n, pats))
    assert share == pytest.approx(0.75) and "reduce_kernel" in what
    assert "75% of its GPU time" in share_reason(share, what, on_gpu=True)
    assert gpu_share([_session([("_row_sum", 10.0)])], lambda n: is_foreign(n, pats))[0] == 0.0
    assert gpu_share([], lambda n: is_foreign(n, pats)) == (0.0, "")


def test_gpu_share_counts_time_the_profiler_did_not_see_on_a_warm_call():
    """A library call hidden from the profiler (its collection toggled off) still takes GPU time
    between the judge's markers: on a warm call that time counts as library work. A cold call (the
    first, which compiles on the host) leaves the GPU idle honestly: not counted there."""
    from autokernel.bench.launches import is_foreign
    from autokernel.bench.share import GAP_US, IDLE_FLOOR_US, UNSEEN, gpu_share, session_work

    foreign = lambda n: is_foreign(n, ("gemm",))  # noqa: E731
    lead = [(0.0, 50.0)]  # the judge's lead sleep
    hidden = _session([("_show", 50.0, 52.0)], warm=True, span=(0.0, 452.0), marks=lead)  # 400 us unseen
    lib, own, names = session_work(hidden, foreign)
    assert own == pytest.approx(2.0)
    assert lib == pytest.approx(400.0 - IDLE_FLOOR_US - 2 * GAP_US) and names[UNSEEN] == pytest.approx(lib)
    share, what = gpu_share([hidden], foreign)
    assert share > 0.99 and UNSEEN in what
    cold = _session([("_show", 50.0, 52.0)], warm=False, span=(0.0, 452.0), marks=lead)
    assert gpu_share([cold], foreign)[0] == 0.0
    # an honest warm call: its kernels back to back behind the lead, a microsecond apart
    honest = _session([("_k1", 51.0, 151.0), ("_k2", 152.0, 252.0), ("_k3", 253.0, 300.0)], warm=True,
                      span=(0.0, 301.0), marks=lead)
    assert gpu_share([honest], foreign) == (0.0, "")


def test_gpu_share_counts_own_time_only_where_no_library_kernel_runs_beside_it():
    """A spinner of its own on a side stream, as long as the library call it hides behind, proves
    nothing: own time overlapped by library kernels is not own."""
    from autokernel.bench.launches import is_foreign
    from autokernel.bench.share import gpu_share

    foreign = lambda n: is_foreign(n, ("gemm",))  # noqa: E731
    spinner = _session([("_spin", 0.0, 105.0), ("sm90_xmma_gemm_bf16", 2.0, 102.0)], warm=True)
    share, what = gpu_share([spinner], foreign)
    assert share == pytest.approx(100.0 / 105.0) and "gemm" in what
    # torch.cuda._sleep of its own is no one's work, like the judge's markers
    assert is_foreign("void at::cuda::(anonymous namespace)::spin_kernel(long)", ("gemm",))


def test_the_end_marker_queued_behind_the_call_ends_its_span():
    """With the end marker (record_gpu's `ended`, queued on the judge's stream right behind the
    call's launches), the span ends where that marker starts: host time of the judge's after the call
    (a collection, the check, a slow wake from the synchronize: ~200 us on the H100, once the honest
    rmsnorm's whole GPU time) is not the call's. A marker-named kernel of the candidate's cannot end
    the span early, and a side stream's kernel seen later still counts."""
    from autokernel.bench.launches import MARKER, call_session
    from autokernel.bench.share import UNSEEN, gpu_share

    spin = f"void at::cuda::(anonymous namespace)::{MARKER}(long)"
    lead, kernel, stop = (spin, 0.0, 2000.0), ("_rmsnorm_fused", 2000.8, 2009.6), (spin, 2010.1, 2010.6)
    late_close = [(spin, 2250.0, 2250.5), (spin, 2260.0, 2260.5)]  # 240 us of host time after the call
    refill = ("Memcpy DtoD (Device -> Device)", -20.0, -10.0)  # queued before the lead: not the call's
    s = call_session([refill, lead, kernel, stop] + late_close, warm=True)
    assert s.span == (0.0, 2010.1) and [k[0] for k in s.intervals] == ["_rmsnorm_fused"]
    assert gpu_share([s], lambda n: "gemm" in n)[0] == 0.0
    # a candidate's marker-named kernel early in the call, then 500 us the profiler did not see:
    # the judge's end marker (queued behind that work) still ends the span
    fake = (spin, 2001.0, 2001.5)
    hidden = call_session([lead, fake, ("_own", 2002.0, 2010.0), (spin, 2510.0, 2510.5),
                           (spin, 2530.0, 2530.5), (spin, 2540.0, 2540.5)], warm=True)
    assert hidden.span == (0.0, 2510.0)
    share, what = gpu_share([hidden], lambda n: "gemm" in n)
    assert share > 0.9 and UNSEEN in what
    # a side stream's kernel seen ending after the end marker is the call's work
    side = call_session([lead, kernel, stop, ("_side", 2005.0, 2100.0)] + late_close, warm=True)
    assert side.span == (0.0, 2100.0)
    # a marker short (the profiler off for the end marker): no session
    assert call_session([lead, kernel] + late_close, warm=True) is None


def test_a_profile_without_the_judges_markers_is_a_cheat():
    from autokernel.bench.launches import Launches, cheat_reason

    gap = Launches(gpu_kernels=["_row_sum"], profile_gap="the judge's own marker kernels ... turned off")
    assert "turned off" in cheat_reason(gap, ("gemm",), on_gpu=True)
    assert cheat_reason(Launches(gpu_kernels=["_row_sum"]), ("gemm",), on_gpu=True) is None


def test_integrity_takes_dynamos_builtins_global_as_no_change(monkeypatch):
    """torch.compile of the problem's Model stores the module's builtins dict in its globals
    (__builtins_dict___0): benign; anything else under that name is a change."""
    import builtins
    import sys
    import types

    from autokernel.bench.integrity import judge_snapshot

    prob = types.ModuleType("kb_problem_test")
    exec("def forward(x):\n    return abs(x)\n", prob.__dict__)
    monkeypatch.setitem(sys.modules, prob.__name__, prob)  # as the judge loads a problem
    snap = judge_snapshot(extra_modules=[prob])
    prob.__dict__["__builtins_dict___0"] = builtins.__dict__
    assert snap.changed() is None
    prob.__dict__["__builtins_dict___1"] = {"abs": lambda x: x}
    assert "__builtins_dict___1" in (snap.changed() or "")


def test_integrity_adopts_the_globals_a_real_torch_compile_installs(monkeypatch):
    """torch.compile of a problem's function installs __compiled_fn_N_<uuid> (and friends) in the
    problem module's globals: no change; rebinding one afterwards (the compiled baseline made slow)
    is one, and so is a planted __import_ alias whose value is not the real module."""
    import sys
    import types

    import torch

    from autokernel.bench.integrity import judge_snapshot

    prob = types.ModuleType("kb_problem_dynamo")
    exec("import torch\ndef forward(x):\n    return torch.relu(x) * 2\n", prob.__dict__)
    monkeypatch.setitem(sys.modules, prob.__name__, prob)
    snap = judge_snapshot(extra_modules=[prob])
    torch._dynamo.reset()
    out = torch.compile(prob.forward, backend="eager")(torch.arange(-2.0, 2.0))
    assert out.tolist() == [0.0, 0.0, 0.0, 2.0]
    installed = [k for k in vars(prob) if k.startswith("__compiled_fn")]
    assert installed, sorted(vars(prob))
    assert snap.changed() is None
    prob.__dict__[installed[0]] = lambda *a: None
    assert installed[0] in (snap.changed() or "")
    prob.__dict__[installed[0]] = vars(prob)[installed[0]]  # (still the fake: stays a change)
    assert snap.changed() is not None

    snap2 = judge_snapshot(extra_modules=[prob])
    prob.__dict__["__import_torch_dot_nn"] = types.ModuleType("torch.nn")
    assert "__import_torch_dot_nn" in (snap2.changed() or "")
    prob.__dict__["__import_torch_dot_nn"] = torch.nn
    assert snap2.changed() is None
    torch._dynamo.reset()


def test_convolutions_by_op_and_kernel_name():
    from autokernel.bench.share import gpu_share, is_convolution

    for conv in ["conv2d", "convolution", "conv_transpose3d", "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32",
                 "cudnn::conv2d_grouped_direct_kernel", "implicit_convolve_sgemm", "xmma_cudnn_winograd"]:
        assert is_convolution(conv), conv
    for other in ["matmul", "sm90_xmma_gemm_bf16bf16_bf16f32", "ampere_sgemm_128x64_nn", "relu", "add"]:
        assert not is_convolution(other), other
    kernels = [("sm90_xmma_fprop_implicit_gemm", 90.0), ("ampere_sgemm_128x64_nn", 5.0), ("_own_relu", 5.0)]
    share, _ = gpu_share([_session(kernels, warm=True)], lambda n: "gemm" in n or "fprop" in n)
    assert share == pytest.approx(0.95)
    share, what = gpu_share([_session(kernels, warm=True)], lambda n: "gemm" in n or "fprop" in n, is_convolution)
    assert share == pytest.approx(0.5) and "sgemm" in what


def test_the_tail_verdict_shows_what_the_host_alone_waits():
    """A tail over the slack is hidden work; its reason also says how long the same wait took with
    nothing running (the idle probe), so that a host delay reads apart from a side stream."""
    from autokernel.bench.time_candidate import TAIL_SLACK_US, tail_reason

    assert tail_reason({"tail_us": TAIL_SLACK_US, "median_us": 10.0, "idle_probe_us": 30.0}) is None
    why = tail_reason({"tail_us": 2400.0, "median_us": 10.0, "idle_probe_us": 31.0})
    assert "2400 us after its last timed call" in why and "nothing running: 31 us" in why and "\n" not in why
    assert "nothing running" not in tail_reason({"tail_us": 2400.0, "median_us": 10.0})


def test_the_flush_buffer_is_checked_at_each_use_not_only_made_once():
    """The cache is a module global a candidate can reach: a smaller buffer put there (its data would
    stay in L2 while it is timed) is replaced at the next use."""
    import torch

    from autokernel.bench import timing

    full = timing.flush_buffer("cpu")
    assert full.numel() == timing.L2_FLUSH_BYTES and full.dtype == torch.uint8
    assert timing.flush_buffer("cpu") is full  # kept while it is what it should be
    timing._flush["cpu"] = torch.empty(1024, dtype=torch.uint8)
    again = timing.flush_buffer("cpu")
    assert again.numel() == timing.L2_FLUSH_BYTES and timing._flush["cpu"] is again
    timing._flush["cpu"] = torch.empty(timing.L2_FLUSH_BYTES * 2, dtype=torch.uint8)[::2]  # right size, strided
    assert timing.flush_buffer("cpu").is_contiguous()
    timing._flush.pop("cpu")


def test_a_profiled_call_must_do_the_work_the_timed_calls_did():
    """Own work only while the profiler watches: the warm profiled call's GPU work (its span after
    the judge's lead sleep) against the timed median."""
    from autokernel.kb.worker import watched_reason
    from autokernel.bench.launches import Launches

    lead = [(0.0, 2000.0)]
    session = _session([("_own_slow", 2001.0, 2900.0)], warm=True, span=(0.0, 2901.0), marks=lead)
    assert session.work_us() == pytest.approx(901.0)
    assert "when the profiler watches" in watched_reason(Launches(gpu_sessions=[session]), 120.0)
    assert watched_reason(Launches(gpu_sessions=[session]), 800.0) is None
    # far less work watched than timed: what it put past the judge's end marker on a side stream
    # (KB: slack 2x, so the floor is median / 4 - 20 us)
    assert watched_reason(Launches(gpu_sessions=[session]), 3684.0) is None  # 901 us >= 901 us
    assert "when the profiler watches" in watched_reason(Launches(gpu_sessions=[session]), 3700.0)
    # ... only where the timed calls were GPU-bound: a host-bound model's median is its host's time
    assert "when the profiler watches" in watched_reason(Launches(gpu_sessions=[session]), 3700.0, host_us=1850.0)
    assert watched_reason(Launches(gpu_sessions=[session]), 3700.0, host_us=1900.0) is None
    # the GPU waiting inside the span (the host's launches after a synchronisation in the call,
    # slowed by the profiler) is not work: kernels of 300 + 300 us in a 2,100-us span, timed 700 us
    gap = _session([("_own_a", 2001.0, 2301.0), ("_own_b", 3801.0, 4101.0)], warm=True, span=(0.0, 4101.0), marks=lead)
    assert gap.work_us() == pytest.approx(2101.0) and gap.busy_us() == pytest.approx(600.0)
    assert watched_reason(Launches(gpu_sessions=[gap]), 700.0) is None
    # ... while kernels that ran longer than the slack allows are, overlapping ones counted once
    both = _session([("_own_a", 2001.0, 3801.0), ("_side", 2500.0, 3000.0), ("_own_b", 3801.0, 4101.0)],
                    warm=True, span=(0.0, 4101.0), marks=lead)
    assert both.busy_us() == pytest.approx(2100.0)
    assert "ran 2100.0 us of GPU time" in watched_reason(Launches(gpu_sessions=[both]), 700.0)
    # the bench's (slack 1.5x, floor median / 3 - 30 us): only where its caller gives a floor
    from autokernel.bench.launches import watched_reason as bench_watched

    assert "when the profiler watches" in bench_watched(session, 2800.0, 1.5, 30.0, floor_us=30.0)
    assert bench_watched(session, 2700.0, 1.5, 30.0, floor_us=30.0) is None
    assert bench_watched(session, 2800.0, 1.5, 30.0) is None
    cold = _session([("_own_slow", 1.0, 900.0)], warm=False, span=(0.0, 901.0), marks=[(0.0, 1.0)])
    assert watched_reason(Launches(gpu_sessions=[cold]), 120.0) is None  # a cold call compiles: not compared


@pytest.mark.gpu
def test_a_host_heavy_honest_call_is_its_own_work_when_profiled_on_gpu():
    """The warm profiled call of the timing stage (time_candidate.library_at) must not count the
    judge's own host delays as hidden library work. A candidate whose calls leave many young Python
    objects leaves the judge host work after the call (a collection, the free). With the span's end
    estimated from the closing markers, host time between the call's end and the first closing
    marker was idle GPU time in the span that no kernel accounts for: on the H100 this candidate
    read as 96% library, the plain starter in the test process as 94% (seventeenth session). The end
    marker queued behind the call (record_gpu's `ended`) ends the span where the call's work does."""
    from types import SimpleNamespace

    from autokernel.bench import timing
    from autokernel.bench.across_calls import Refill
    from autokernel.bench.launches import Launches, library_share, record_gpu
    from autokernel.bench.time_candidate import library_at
    from autokernel.kernelfile import entry_point, import_kernel, read_kernel_file
    from autokernel.kernels import get_spec, starter_path

    spec, path = get_spec("rmsnorm"), starter_path("rmsnorm", "triton")
    kernel = entry_point(import_kernel(read_kernel_file(path)))
    young: list = []

    def fn(*args):
        young[:] = [[[] for _ in range(20_000)]]  # ~20k tracked objects alive until the next call
        return kernel(*args)

    refill = Refill(spec, list(spec.default_shapes)[0], torch.bfloat16, "cuda")
    t = timing.time_call(fn, refill.args, "cuda", refill=refill)
    launches = Launches()  # the pipeline library_at runs, by hand: a failure shows the timeline
    refill(-2)
    with record_gpu(launches, lead_us=max(2000.0, 4 * t["host_rep_us"])) as ended:
        fn(*refill.args)
        ended()
    session = launches.gpu_sessions[-1]
    share, what = library_share(launches, spec.library_kernel_patterns, on_gpu=True)
    assert share <= 0.5, (share, what, session.span, session.marks, session.intervals)
    for _ in range(3):
        assert library_at(SimpleNamespace(verify=lambda: None), spec, fn, refill, t["host_rep_us"], t["median_us"]) is None
