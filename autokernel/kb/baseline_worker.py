"""The trusted baselines child: `python -m autokernel.kb.baseline_worker`, the same line protocol as
the judge children (bench/worker.serve). It runs only a problem's own reference Model (the
KernelBench checkout's code), never a candidate, so it is started outside the sandbox with the
run's shared inductor/Triton cache (kb/baselines.py sets TORCHINDUCTOR_CACHE_DIR and
TRITON_CACHE_DIR). Two requests:

- "compile": torch.compile(Model, COMPILE_MODE) built and called once on the timing inputs under
  no_grad, as the judge's baseline timing calls it: the compiled graph and its kernels land in the
  shared cache. Nothing is timed.
- "baselines": eager and torch.compile of the Model timed by kb/timing.py's own functions
  (baselines_gpu / baselines_cpu: same inputs and seed, CUDA events, L2 flushed, median,
  COMPILE_MODE, fp32 without TF32), both in the same run; the reply names the device and its key
  so that the judge uses them only on the same device.

Both replies carry the inductor cache counters of the request (fxgraph_cache_hit / _miss), so the
caller sees whether the timing hit what the compile workers wrote.
"""

from __future__ import annotations

import sys
import time
import traceback

CACHE_COUNTERS = (("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
                  ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"))


def _counts() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {name: int(counters[group][name]) for group, name in CACHE_COUNTERS}


def _problem(req: dict):
    import hashlib

    import torch

    from autokernel.kb.inputs import to_device
    from autokernel.kb.problems import load_source
    from autokernel.kb.timing import exact_fp32

    code = req["problem_code"]
    prob = load_source(code, "kb_problem_" + hashlib.sha256(code.encode()).hexdigest()[:16])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    exact_fp32()
    return prob, [to_device(a, device) for a in prob.get_init_inputs()], device


def _serve_one(req: dict, work) -> dict:
    """Runs `work(prob, init, device, seed)` under the bench's stage alarm; a failure of the problem
    (an inductor error, out of memory) is the reply's "error", and a broken CUDA context asks the
    parent for a fresh process. The cache counters and seconds of the request are in every reply."""
    import signal

    import torch

    from autokernel.bench import judge as bj

    old = signal.signal(signal.SIGALRM, bj.on_alarm)
    before, t0 = _counts(), time.monotonic()
    reply: dict = {}
    restart = False
    try:
        prob, init, device = _problem(req)
        reply = work(prob, init, device, int(req.get("seed", 42)))
    except Exception as exc:  # noqa: BLE001 - the problem's failure is the reply, the process goes on
        bj.disarm()
        restart = bj.classify(exc)[1]
        root = bj.root_cause(exc)
        why = "exceeded its time limit" if isinstance(root, bj.StageTimeout) else f"{type(root).__name__}: {root}"
        reply = {"error": why[:300], "traceback": traceback.format_exc()[-2000:]}
    finally:
        torch._dynamo.reset()  # the next problem compiles from the cache, not from this process's memory
        restart = bj.end_judgement(old, torch.cuda.is_available(), empty_cache=True) or restart
    after = _counts()
    reply["cache"] = {k: after[k] - before[k] for k in after}
    reply["s"] = round(time.monotonic() - t0, 2)
    reply["restart"] = restart
    return reply


def compile_problem(req: dict, send=None) -> dict:
    def work(prob, init, device, seed):
        import torch

        from autokernel.bench import judge as bj
        from autokernel.bench.timing import COMPILE_MODE
        from autokernel.kb.inputs import build_model
        from autokernel.kb.timing import BASELINE_S, timing_inputs

        inputs = timing_inputs(prob, device, seed)
        ref = build_model(prob.Model, init, device, seed)
        bj.arm(float(req.get("timeout_s") or BASELINE_S))
        compiled = torch.compile(ref, mode=COMPILE_MODE)
        with torch.no_grad():
            compiled(*inputs.args)
        if device == "cuda":
            torch.cuda.synchronize()
        bj.disarm()
        return {"compiled": True, "compile_mode": COMPILE_MODE}

    return _serve_one(req, work)


def measure_problem(req: dict, send=None) -> dict:
    def work(prob, init, device, seed):
        from autokernel.bench import judge as bj
        from autokernel.bench.timing import COMPILE_MODE
        from autokernel.kb import timing

        inputs = timing.timing_inputs(prob, device, seed)
        base = timing.baselines_gpu(prob, init, seed, inputs) if device == "cuda" else \
            timing.baselines_cpu(prob, init, seed, inputs)
        env = bj.environment()
        return {"baselines": {**base, "device": env["name"], "device_key": env["key"], "compile_mode": COMPILE_MODE,
                              "timing": "CUDA events, L2 flushed, median" if device == "cuda" else timing.CPU_TIMING}}

    return _serve_one(req, work)


def main() -> int:
    from autokernel.bench.worker import serve

    return serve({"compile": compile_problem, "baselines": measure_problem})


if __name__ == "__main__":
    sys.exit(main())
