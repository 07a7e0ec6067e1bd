"""GPU checks of issue 18 (skipped without CUDA): the screen's cost and its agreement with the full
timing on the H200, the persistent schedules at the model's shapes, and a short loop on a real
kernel that screens, never judges a configuration twice and reuses the library's timings."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from autokernel.bench import CORRECT, BenchWorker
from autokernel.kernelfile import with_config
from autokernel.kernels import get_spec, starter_path
from autokernel.store import Store

SHAPE = {"rows": 2048, "cols": 4096}  # LLaMA-7B's norms at 1 x 2048


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_the_screen_is_cheap_and_agrees_with_the_full_timing():
    source = starter_path("rmsnorm").read_text()
    configs = [{}, {"TILE_ELEMS": 4096}, {"ELEMS_PER_THREAD": 8}, {"SCHEDULE": "persistent"},
               {"SCHEDULE": "persistent", "PROGRAMS_PER_SM": 8}, {"TILE_ELEMS": 2048, "MAX_WARPS": 8}]
    with BenchWorker() as worker:
        full = worker.judge(source=source, kernel_type="rmsnorm", shapes=[SHAPE], dtype="bfloat16", timeout_s=300)
        assert full.outcome == CORRECT, full.error
        screens = [worker.screen(source=with_config(source, c), kernel_type="rmsnorm", shapes=[SHAPE],
                                 dtype="bfloat16", timeout_s=120) for c in configs]
    assert all(s.outcome == CORRECT and s.gpu_timing and s.latency_us > 0 for s in screens), \
        [(s.outcome, s.error) for s in screens]
    # the same kernel, screened: within 25% of its full timing at the shape (same timing function)
    assert screens[0].latency_us == pytest.approx(full.extra["per_shape"][0]["latency_us"], rel=0.25)
    # issue 18: the median screening cost at most 3 s per candidate (a warm worker, compile included)
    assert statistics.median(s.duration_s for s in screens[1:]) <= 3.0


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_type, shape", [("rmsnorm", SHAPE), ("rmsnorm", {"rows": 1, "cols": 4096}),
                                                ("softmax", {"rows": 32 * 2048, "cols": 2048}),
                                                ("softmax", {"rows": 37, "cols": 1000})])
def test_the_persistent_schedules_are_correct_at_model_shapes(kernel_type, shape, tmp_path):
    from autokernel.bench.checks import make_inputs, run_check
    from autokernel.kernelfile import import_kernel, parse_source

    src = with_config(starter_path(kernel_type).read_text(), {"SCHEDULE": "persistent", "PROGRAMS_PER_SM": 2})
    path = tmp_path / f"{kernel_type}.py"
    path.write_text(src)
    mod = import_kernel(parse_source(src, path))
    spec = get_spec(kernel_type)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        run_check(spec, mod.kernel_fn, make_inputs(spec, shape, dtype, "cuda", 7), "cuda")


@pytest.mark.gpu
@pytest.mark.timeout(1500)
def test_a_short_loop_screens_and_never_judges_twice_on_the_gpu(home):
    from autokernel.loop import run_loop
    from autokernel.workspace import Workspace

    store, ws = Store(home.db), Workspace.open(home)
    name = "gpu.rmsnorm"
    sha = ws.add_kernel(name, starter_path("rmsnorm").read_text(), "rmsnorm starter")
    store.add_kernel(name, "rmsnorm", model="gpu", share=0.05, shapes=None, dtype="bfloat16",
                     branch=ws.branch_name(name), base_commit=sha)
    k = store.find_kernel(name)
    store.update_kernel(k.id, shapes_json=json.dumps({"shapes": [SHAPE, {"rows": 1, "cols": 4096}],
                                                      "weights": [65, 65 * 64]}))
    summary = run_loop(store, ws, model="gpu", max_experiments=24, hours=0.2, verify=False, timeout_s=300)
    rows = store.list_experiments(run_id=summary.run_id)
    start = rows[0]
    assert start.status == "baseline" and start.speedup_vs_eager and start.compile_us
    exps = rows[1:]
    assert summary.experiments == len(exps) == 24
    assert len({e.candidate_key for e in rows}) == len(rows)  # nothing judged twice
    assert all(e.screen_us is not None for e in exps if e.status not in ("crashed", "timeout"))
    full = [e for e in exps if e.status in ("kept", "reverted")]
    # the library was timed once, by the start: every full judgement carries its per-shape timings
    for e in full:
        per = json.loads(e.details_json)
        assert all(p["eager_us"] and p["compile_us"] for p in per) and e.speedup_vs_eager
    stopped = [e for e in exps if e.status == "screened"]
    if stopped:
        assert statistics.median(e.duration_s for e in stopped) < statistics.median(e.duration_s for e in full or stopped)
