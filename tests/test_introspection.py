"""A judged candidate gets no frame, no garbage-collector walk, no trace function and no ctypes
(bench/introspection.py): each route is refused in the judge's process and the refusal is the
verdict, whether the candidate catches the PermissionError or not; the judge's and the libraries'
own introspection goes on, and an honest candidate judged next in the same process is correct."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autokernel.bench.result import CHEAT, CORRECT
from autokernel.bench.runner import BenchWorker
from autokernel.kernels import starter_path

ROOT = Path(__file__).resolve().parent.parent
CHEATS = Path(__file__).parent / "cheats"

ROUTES = {
    "sys._getframe": "sys._getframe(1)",
    "inspect": "import inspect\ninspect.stack()",
    "tb_frame": "try:\n    raise ValueError\nexcept ValueError as e:\n    e.__traceback__.tb_frame.f_back",
    "gi_frame": "g = (i for i in range(2))\ng.gi_frame",
    "gc.get_referrers": "import gc\ngc.get_referrers(x)",
    "sys.settrace": "sys.settrace(lambda *a: None)\nsys.settrace(None)",
    "ctypes": "import ctypes\nctypes.c_char.from_address(id(x))",
    "thread": "import threading\nt = threading.Thread(target=sys._current_frames)\nt.start()\nt.join()",
}


def _candidate(body: str, catch: bool) -> str:
    reach = textwrap.indent(body, "        " if catch else "    ")
    if catch:  # caught: it goes on honestly, having got nothing
        reach = "    try:\n" + reach + "\n    except PermissionError:\n        pass"
    src = starter_path("reduce", "triton").read_text()
    head, sep, tail = src.partition("def kernel_fn(")
    return head.replace("import torch\n", "import sys\n\nimport torch\n", 1) + \
        "def kernel_fn(x, *args, **kwargs):\n" + reach + "\n    return _starter_kernel_fn(x, *args, **kwargs)\n\n\n" + \
        sep.replace("def kernel_fn(", "def _starter_kernel_fn(") + tail


@pytest.fixture(scope="module")
def worker():
    with BenchWorker() as w:
        yield w


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_each_route_into_the_judge_is_refused_and_is_the_verdict(worker, route, tmp_path):
    catch = route in ("sys._getframe", "gc.get_referrers", "ctypes")  # and a few of them caught
    path = tmp_path / f"reach_{route.replace('.', '_')}.py"
    path.write_text(_candidate(ROUTES[route], catch))
    res = worker.judge(path, quick=True, timeout_s=120)
    assert res.outcome == CHEAT, (res.outcome, res.error)
    assert "refused" in res.error and path.name in res.error + " ".join(s.detail or "" for s in res.stages) \
        or (route == "thread" and "a thread of the standard library" in res.error), res.error
    honest = worker.judge(starter_path("reduce", "triton"), quick=True, timeout_s=120)
    assert honest.outcome == CORRECT, honest.error  # counted per judgement: the next one starts clean


def test_a_late_switch_that_blinds_the_timed_samples_is_refused(worker):
    res = worker.judge(CHEATS / "bench" / "blind_sampler.py", quick=True, timeout_s=120)
    assert res.outcome == CHEAT and "refused: sys._getframe from blind_sampler.py" in res.error, res.error


def test_libraries_and_logging_keep_their_introspection(tmp_path):
    """In a process with the hook: a script (untrusted, like a candidate) that logs a warning and has
    torch.fx trace a module (which records stack traces) is not refused; its own sys._getframe is,
    and so is logging.currentframe (a stdlib function that would hand it a frame)."""
    script = tmp_path / "uses_libraries.py"
    script.write_text(textwrap.dedent(f"""
        import logging, sys
        sys.path.insert(0, {str(ROOT)!r})
        from autokernel.bench.introspection import deny_to_candidates, refusals
        deny_to_candidates()
        import torch
        logging.getLogger("candidate").warning("a warning")
        torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()))
        assert refusals() == [], refusals()
        for reach in (lambda: sys._getframe(), logging.currentframe):
            try:
                reach()
                raise SystemExit("not refused")
            except PermissionError:
                pass
        print(len(refusals()))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "2", out.stdout + out.stderr


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_honest_starters_are_not_refused_on_gpu(worker):
    """On the GPU the judge compiles with Triton, times torch.compile baselines and profiles library
    work, all with the hook installed: no honest starter may be refused anything."""
    from autokernel.kernels import KERNEL_TYPES, get_spec

    for t in KERNEL_TYPES:
        spec = get_spec(t)
        res = worker.judge(starter_path(t, "triton"), shapes=[spec.small_shapes[0]], quick=True, timeout_s=300)
        assert res.outcome == CORRECT and "refused" not in (res.error or ""), (t, res.outcome, res.error)


def test_the_cpu_timing_child_refuses_it_too():
    """The loop's CPU timing (cpu_timing.py) runs the candidate in a child of its own, hook included."""
    from autokernel.cpu_timing import CPUTimingFailed, cpu_wallclock

    source = (CHEATS / "bench" / "blind_sampler.py").read_text()
    with pytest.raises(CPUTimingFailed) as err:
        cpu_wallclock(source, kernel_type="reduce", timeout_s=120)
    assert err.value.cheat and "refused: sys._getframe from" in str(err.value), str(err.value)
