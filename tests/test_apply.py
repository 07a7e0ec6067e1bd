"""AutoKernel inside the user's model: kernels as custom ops, autokernel.apply, per-shape dispatch,
torch.compile with no graph break or recompile, and timing at workloads (CPU, Triton interpreter)."""

from __future__ import annotations

import json

import pytest
import torch

import autokernel
from autokernel.dispatch import Decision, Decisions, from_bench
from autokernel.errors import ConfigError, NotFoundError
from autokernel.extract import extract
from autokernel.kernels import KERNEL_TYPES, get_spec, starter_path
from autokernel.models import load_model, output_tensor
from autokernel.ops import op_signature, register_source
from autokernel.plug import Plug
from autokernel.store import Store
from autokernel.verify import verify
from autokernel.workload_timing import WorkloadTimer
from autokernel.workloads import Workload, default_workloads, parse_workload
from autokernel.workspace import Workspace


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_every_starter_is_a_custom_op_that_passes_opcheck(kernel_type):
    spec = get_spec(kernel_type)
    op = register_source(starter_path(kernel_type).read_text())
    assert op.name.startswith(f"autokernel::{kernel_type}_") and op.kind == "custom_op"  # interpreter: opaque
    assert op is register_source(starter_path(kernel_type).read_text())  # one op per source and process
    for shape in spec.small_shapes[:2]:
        args = spec.make_inputs(shape, torch.float32, "cpu", torch.Generator().manual_seed(1))
        result = torch.library.opcheck(op.op, args)
        assert set(result.values()) == {"SUCCESS"}, result
        out, ref = op(*args), spec.reference(*args)
        assert out.shape == ref.shape and out.dtype == ref.dtype
        assert torch.allclose(out.double(), ref.double(), atol=1e-4, rtol=1e-4)


def test_op_schema_is_the_reference_signature():
    sig = op_signature("flash_attention")
    assert list(sig.parameters) == ["q", "k", "v", "causal", "scale", "mask"]
    op = register_source(starter_path("flash_attention").read_text())
    schema = str(op.op._schema)
    assert "bool causal" in schema and "float? scale=None" in schema and "Tensor? mask=None" in schema
    assert schema.endswith("-> Tensor")


def _compile_counting(model):
    """torch.compile with aot_eager through a backend that records every graph it is given."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    return torch.compile(model, backend=backend), graphs


def test_tiny_llama_with_autokernel_compiles_without_graph_breaks_or_recompiles_and_matches_eager(tmp_path):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    b = load_model("llama-tiny", seq=16)
    handle = autokernel.apply(b.model, kernels="starters", home=tmp_path, use_unmeasured=True)
    compiled, graphs = _compile_counting(b.model)
    with torch.inference_mode():
        for seed in (1, 2, 3):  # fresh inputs of the same shape: one graph, compiled once
            inputs = b.make_inputs(seed)
            out = output_tensor(compiled(**inputs))
            handle.reset_counts()
            eager = output_tensor(b.model(**inputs))
            assert torch.allclose(out, eager, atol=1e-5, rtol=1e-5)
    assert len(graphs) == 1 and not counters["graph_break"]
    ops = {str(n.target).split(".")[1].rsplit("_", 1)[0] for n in graphs[0].graph.nodes
           if str(n.target).startswith("autokernel.")}
    # every replaced kind of call is an AutoKernel op in the graph; attention too: while tracing,
    # transformers cannot drop the causal mask (it would have to look at the data), and a masked call
    # of 16 queries is the flash_attention kernel's decode path (eager mode drops the mask: prefill)
    assert ops == {"rmsnorm", "rotary_embedding", "matmul", "fused_mlp", "flash_attention"}
    rep = handle.report
    assert rep.calls["rmsnorm"] == 5 and rep.calls["fused_mlp"] == 2  # the last eager call, counted
    assert rep.shapes["flash_attention"] == {("1x4x2x16x16x1", "float32"): 2}
    handle.remove()
    assert "forward" not in b.model.model.norm.__dict__  # restored
    torch._dynamo.reset()


def _apply_given_home_writes_nowhere_else(tmp_path, monkeypatch, backend: str):
    """apply(home=H) with $AUTOKERNEL_HOME unset, in a fresh working directory and user home: the
    kernel (source text, so it is copied into a cache to be imported) runs in the model; returns
    (H's Paths, what the applied handle's live cache answered, the CUDA build folder it resolved)."""
    from autokernel.config import cache_dir, resolve_home
    from autokernel.cuda.build import build_dir_for

    for var in ("AUTOKERNEL_HOME", "AUTOKERNEL_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    cwd, user = tmp_path / "cwd", tmp_path / "user"
    cwd.mkdir()
    user.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(user))
    paths = resolve_home(tmp_path / "h")
    # a source of its own (no file, unseen by this process): apply copies it into the cache
    source = starter_path("rmsnorm", backend).read_text() + f"\n# applied from {tmp_path.name}\n"
    b = load_model("llama-tiny", seq=16)
    with autokernel.apply(b.model, kernels={"rmsnorm": source}, home=paths.home, use_unmeasured=True) as h:
        live, build = cache_dir(), build_dir_for("0123abcd")
        with torch.inference_mode():
            out = output_tensor(b.forward())
        assert h.report.calls["rmsnorm"] == 5 and torch.isfinite(out).all()
    assert cache_dir() == (cwd / ".autokernel" / "cache").resolve()  # released with the kernels
    assert list(cwd.iterdir()) == [] and not (user / ".autokernel").exists()
    copies = list((paths.cache / "kernel_sources").glob("*.py"))
    assert len(copies) == 1 and copies[0].read_text() == source
    return paths, live, build


def test_apply_given_home_keeps_every_cache_write_there(tmp_path, monkeypatch):
    paths, live, build = _apply_given_home_writes_nowhere_else(tmp_path, monkeypatch, "triton")
    # a CUDA kernel's extension, built at its first call, resolves its folder the same way
    assert live == paths.cache and build == paths.cache / "cuda" / "0123abcd"


@pytest.mark.gpu
def test_apply_given_home_builds_cuda_kernels_there(tmp_path, monkeypatch):
    paths, _, _ = _apply_given_home_writes_nowhere_else(tmp_path, monkeypatch, "cuda")
    builds = list((paths.cache / "cuda").iterdir())
    assert builds and any(p.suffix == ".so" for p in builds[0].iterdir())


def test_compile_leaves_unmeasured_kernels_out_by_default_and_uses_measured_wins(tmp_path):
    torch._dynamo.reset()
    b = load_model("llama-tiny", seq=16)
    with autokernel.apply(b.model, kernels=["rmsnorm"], home=tmp_path) as h:
        compiled, graphs = _compile_counting(b.model)
        with torch.inference_mode():
            compiled(**b.inputs)
        assert not any(str(n.target).startswith("autokernel.") for n in graphs[0].graph.nodes)
        # eager mode uses it at unmeasured shapes
        with torch.inference_mode():
            b.forward()
        assert h.report.calls["rmsnorm"] == 5
    torch._dynamo.reset()
    op = register_source(starter_path("rmsnorm").read_text())
    d = Decisions("rmsnorm")
    d.add(Decision("rmsnorm", "compile", "16x64", "float32", True))
    with Plug(b.model, {"rmsnorm": op}, {"rmsnorm": d}):
        compiled, graphs = _compile_counting(b.model)
        with torch.inference_mode():
            compiled(**b.inputs)
    names = [str(n.target) for n in graphs[0].graph.nodes if str(n.target).startswith("autokernel.")]
    assert len(names) == 5 and all("rmsnorm" in n for n in names)
    torch._dynamo.reset()


def test_a_declined_shape_runs_pytorch_and_is_counted():
    b = load_model("llama-tiny", seq=16)
    op = register_source(starter_path("rmsnorm").read_text())
    d = Decisions("rmsnorm")
    d.add(Decision("rmsnorm", "eager", "16x64", "float32", False, 2.0, 1.0))
    with torch.inference_mode():
        ref = output_tensor(b.forward()).clone()
        with Plug(b.model, {"rmsnorm": op}, {"rmsnorm": d}) as plug:
            out = output_tensor(b.forward())
            other = output_tensor(b.model(**load_model("llama-tiny", seq=8).inputs))  # 8x64: not declined
    assert torch.equal(out, ref)
    rep = plug.report
    assert rep.declined["rmsnorm"] == 5 and rep.calls["rmsnorm"] == 5 and other.shape[1] == 8
    assert rep.shapes["rmsnorm"] == {("8x64", "float32"): 5}


def test_forward_only_kernels_leave_autograd_to_pytorch():
    b = load_model("llama-tiny", seq=8)
    op = register_source(starter_path("rmsnorm").read_text())
    with Plug(b.model, {"rmsnorm": op}) as plug:
        out = output_tensor(b.forward())
        out.float().sum().backward()  # would fail if a kernel had taken a call that needs a gradient
    assert plug.report.calls["rmsnorm"] == 0 and plug.report.declined["rmsnorm"] == 5
    assert b.model.model.norm.weight.grad is not None


def _store_with_kept_rmsnorm(home):
    store = Store(home.db)
    ws = Workspace.open(home)
    entries = [{"kernel_type": "rmsnorm", "label": "rmsnorm", "gpu_ms": 0.2, "share": 0.2, "calls": 5,
                "shapes": [{"rows": 16, "cols": 64}], "weights": [5], "dtype": "float32", "amdahl": 1.25,
                "gemm_ms": 0.0}]
    store.add_profile("llama-tiny", entries, config={"batch": 1, "seq": 16, "dtype": "float32", "device": "cpu"},
                      device="cpu")
    kernels = extract(store, ws, top=1)
    run = store.create_run("loop", model="llama-tiny")
    k = kernels[0]
    store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm", commit=ws.head(k.name),
                         status="kept", latency_us=10.0, speedup_vs_eager=1.5)
    return store, ws, run


def test_apply_as_a_user_calls_it(home):
    store, ws, run = _store_with_kept_rmsnorm(home)
    store.close()
    b = load_model("llama-tiny", seq=16)
    with torch.inference_mode():
        ref = output_tensor(b.forward()).clone()
    handle = autokernel.apply(b.model, home=home.home)  # permanent form: the latest loop run's kernels
    assert [k.name for k in handle.kernels] == ["llama-tiny.rmsnorm"]
    assert handle.kernels[0].origin.startswith("experiment 1 (")
    with torch.inference_mode():
        out = output_tensor(b.forward())
    assert torch.allclose(out, ref, atol=1e-5) and handle.report.calls["rmsnorm"] == 5
    assert handle.summary()[0]["op"].startswith("autokernel::rmsnorm_")
    handle.remove()
    assert "forward" not in b.model.model.norm.__dict__
    with autokernel.apply(b.model, run=run.id, home=home.home) as h2:  # the context-manager form
        with torch.inference_mode():
            b.forward()
        assert h2.report.calls["rmsnorm"] == 5
    assert "forward" not in b.model.model.norm.__dict__

    with pytest.raises(NotFoundError, match="kernels='starters'"):
        autokernel.apply(b.model, home=home.home / "nowhere")
    with pytest.raises(ConfigError, match="torch.nn.Module"):
        autokernel.apply("llama", home=home.home)
    with pytest.raises(NotFoundError, match="nosuch"):
        autokernel.apply(b.model, kernels=["nosuch"], home=home.home)
    with pytest.raises(ConfigError, match="unknown kernel type"):
        autokernel.apply(b.model, kernels={"nosuch": "x.py"}, home=home.home)


def test_verify_records_decisions_per_shape_and_apply_follows_them(home):
    store, ws, run = _store_with_kept_rmsnorm(home)
    r = verify(store, ws, time_iters=2, workloads=[Workload("prefill", 1, 16), Workload("decode", 1, 16)])
    assert r.ok and [w["workload"] for w in r.workloads] == ["prefill 1x16", "decode b1 @16"]
    rows = store.list_dispatch(kernel_type="rmsnorm")
    assert {(d.mode, d.shape, d.workload, d.device) for d in rows} == {
        ("eager", "16x64", "prefill 1x16", "cpu"), ("eager", "1x64", "decode b1 @16", "cpu")}
    # each decision is what its measurement says (the interpreter is usually far slower than PyTorch on
    # the CPU, but a loaded machine can blur two 1-ms timings, so the test follows the measurement)
    assert all(d.use == (d.kernel_ms * 1.005 < d.fallback_ms) for d in rows)
    at16 = next(d for d in rows if d.shape == "16x64")
    store.close()
    b = load_model("llama-tiny", seq=16)
    with autokernel.apply(b.model, home=home.home) as h, torch.inference_mode():
        b.forward()
        assert (h.report.calls["rmsnorm"], h.report.declined["rmsnorm"]) == ((5, 0) if at16.use else (0, 5))


def test_workload_timer_times_every_mode_and_decides_per_workload():
    torch._dynamo.reset()
    b = load_model("llama-tiny", seq=16)
    ops = {t: register_source(starter_path(t).read_text()) for t in ("rmsnorm", "rotary_embedding")}
    timer = WorkloadTimer(b, ops, iters=3, rounds=1, modes=("eager", "compile"), compile_backend="aot_eager")
    res = timer.run(Workload("decode", 2, 16)).to_dict()
    assert [r["mode"] for r in res["rows"]] == ["eager", "compile"]
    assert res["shapes"] == {"rmsnorm": ["2x64 float32"], "rotary_embedding": ["2x2x1x16 float32", "2x4x1x16 float32"]}
    comp = res["rows"][1]
    assert comp["graph_breaks"] == 0 and comp["recompiles"] == 0 and comp["rel_error"] < 1e-5
    assert comp["rejected_ms"] is not None and "no kernel used" in comp["note"]  # interpreted kernels lose
    assert res["best_with"] is not None and res["speedup"] == pytest.approx(1.0)
    modes = {(d["kernel_type"], d["mode"]) for d in res["decisions"]}
    assert modes == {(t, m) for t in ("rmsnorm", "rotary_embedding") for m in ("eager", "compile")}
    torch._dynamo.reset()


def test_workloads_parse_and_defaults():
    assert parse_workload("prefill:1x2048") == Workload("prefill", 1, 2048)
    assert parse_workload(" decode:32@2048 ").label == "decode b32 @2048"
    for bad in ("prefill:0x5", "decode:1x5", "train:1x5", ""):
        with pytest.raises(ConfigError, match="bad workload"):
            parse_workload(bad)
    assert [w.kind for w in default_workloads(load_model("llama-tiny", seq=16))] == ["prefill", "decode"]
    assert [w.kind for w in default_workloads(load_model("bert-tiny", seq=8))] == ["forward"]


def test_bench_timings_become_decisions():
    rows = [{"shape": {"rows": 8, "cols": 64}, "dtype": "bfloat16", "latency_us": 10.0, "wall_us": 30.0,
             "eager_us": 20.0, "eager_wall_us": 25.0, "compile_us": 12.0},
            {"shape": {"rows": 4096, "cols": 64}, "dtype": "bfloat16", "latency_us": 10.0, "wall_us": 11.0,
             "eager_us": 20.0, "eager_wall_us": 25.0, "compile_us": 9.0}]
    got = {(d.mode, d.shape): d.use for d in from_bench("rmsnorm", rows, get_spec("rmsnorm").shape_label)}
    # eager compares what the host sees (30 us of launch path vs eager's 25 us); compile, GPU time
    assert got == {("eager", "8x64"): False, ("compile", "8x64"): True,
                   ("eager", "4096x64"): True, ("compile", "4096x64"): False}


def test_report_md_carries_the_workload_table(home, run_cli):
    store, ws, run = _store_with_kept_rmsnorm(home)
    verify(store, ws, time_iters=2, workloads=[Workload("prefill", 1, 16)])
    store.close()
    code, out, _ = run_cli("report", "--format", "md")
    assert code == 0
    assert "llama-tiny where users run it" in out and "| prefill 1x16 | eager |" in out
    code, out, _ = run_cli("verify", "--json", "--workload", "decode:1@16", "--iters", "2")
    assert code == 0 and json.loads(out)["workloads"][0]["workload"] == "decode b1 @16"
    code, _, err = run_cli("verify", "--workload", "decode:1x16")
    assert code == 4 and "bad workload" in err


def test_apply_after_torch_compile_reaches_the_compiled_model(tmp_path):
    torch._dynamo.reset()
    b = load_model("llama-tiny", seq=16)
    compiled, graphs = _compile_counting(b.model)  # compiled first, called only after apply
    with autokernel.apply(compiled, kernels=["rmsnorm"], home=tmp_path, use_unmeasured=True) as h:
        with torch.inference_mode():
            out = output_tensor(compiled(**b.inputs))
        assert h.report.sites["rmsnorm"] == 5
    names = [str(n.target) for n in graphs[0].graph.nodes if str(n.target).startswith("autokernel.")]
    assert len(names) == 5 and all("rmsnorm" in n for n in names)
    with torch.inference_mode():
        assert torch.allclose(out, output_tensor(b.forward()), atol=1e-5)
    torch._dynamo.reset()


def test_eager_kernels_must_win_one_call_at_a_time_and_back_to_back():
    from autokernel.workload_timing import Timing, _beats

    without = Timing(21.04, 0.1, 22.37)
    assert not _beats(Timing(21.41, 0.1, 21.17), without)  # faster back to back only (H200, 1x128)
    assert not _beats(Timing(20.0, 0.1, 23.0), without)  # faster one call at a time only
    assert _beats(Timing(20.0, 0.1, 21.0), without)
    assert not _beats(Timing(21.0, 0.1, 22.3), without)  # inside MIN_GAIN on both
    assert _beats(Timing(1.0, 0.0, None), Timing(2.0, 0.0, None))  # the CPU: no wall time


def _routes_apart_timer() -> WorkloadTimer:
    """llama-tiny with rmsnorm's and flash_attention's starters, compiled (aot_eager), routes apart."""
    torch._dynamo.reset()
    b = load_model("llama-tiny", seq=16)
    ops = {t: register_source(starter_path(t).read_text()) for t in ("rmsnorm", "flash_attention")}
    return WorkloadTimer(b, ops, iters=2, rounds=1, modes=("compile",), compile_backend="aot_eager",
                         routes_apart=True)


def test_workload_timer_times_the_routes_alone_where_asked(monkeypatch):
    # the attention route changes a compiled prefill even where no kernel takes a call, so verify
    # --routes-apart times that variant too: routes installed, every kernel declining
    import autokernel.plug as plug_mod

    timer = _routes_apart_timer()
    variants, compiled, use = [], timer._compiled, plug_mod.Route._compiled_use

    def spy(run, mode, types, keys=None):  # each compiled variant, and what its traced calls chose
        variants.append([types, []])
        return compiled(run, mode, types, keys)

    def traced_use(route, args):
        took = use(route, args)
        variants[-1][1].append((route.kernel_type, took))
        return took

    timer._compiled = spy
    monkeypatch.setattr(plug_mod.Route, "_compiled_use", traced_use)
    comp = timer.run(Workload("prefill", 1, 16)).to_dict()["rows"][0]
    both = ["flash_attention", "rmsnorm"]
    assert [v[0] for v in variants] == [None, both, both]
    assert {t for t, took in variants[1][1] if took} == set(both)  # with the kernels: both take calls
    assert variants[2][1] and not any(took for _, took in variants[2][1])  # routes alone: every call declined
    assert comp["routes_only"]["ms"] > 0 and f"routes alone {comp['routes_only']['ms']:.3f} ms" in comp["note"]
    # the routes' output is judged too: the same model, so within the tolerance
    assert comp["routes_rel_error"] is not None and comp["routes_rel_error"] < timer.tolerance
    assert "outputs differ" not in comp["note"]
    # one more compile per mode only where asked
    assert WorkloadTimer(timer.bundle, timer.kernels).routes_apart is False
    torch._dynamo.reset()


def test_workload_timer_says_where_the_routes_alone_give_another_output():
    # a route that changed the model's answer would make its time meaningless: the note says so
    timer = _routes_apart_timer()
    compiled = timer._compiled

    def wrong_routes(run, mode, types, keys=None):
        timing, info = compiled(run, mode, types, keys)
        if types and keys == {}:  # the routes-alone variant: its output off by 10%
            info = dict(info, out=info["out"] * 1.1)
        return timing, info

    timer._compiled = wrong_routes
    comp = timer.run(Workload("prefill", 1, 16)).to_dict()["rows"][0]
    assert comp["routes_rel_error"] == pytest.approx(0.1, rel=0.05)
    assert "routes alone" in comp["note"] and "(outputs differ: 0.1 > 0.01)" in comp["note"]
    assert comp["rel_error"] < timer.tolerance  # the variant with the kernels is untouched
    torch._dynamo.reset()
