"""The LLM prompt, rendered for a model's kernel and for a KernelBench problem, holds what an expert
kernel engineer would want on the desk (issue 21): each item is checked by its content."""

from __future__ import annotations

import json

from autokernel.proposers.base import KernelContext
from autokernel.proposers.prompt import FailedAnswer, build_prompt
from autokernel.store import Store

H200 = {"copy_gbps": 4000.0, "matmul_tflops_fp32": 50.0, "matmul_tflops_fp16": 700.0, "matmul_tflops_bf16": 700.0}
SQUARE = {"M": 4096, "N": 4096, "K": 4096}
SKINNY = {"M": 1, "N": 4096, "K": 4096}
SOURCE = 'KERNEL_TYPE = "matmul"\nBACKEND = "triton"\nBLOCK_M = 128\n\ndef kernel_fn(a, b):\n    return a\n'


def _history(store, run_id, kernel_id):
    """baseline, a kept search step, a reverted llm change, then three identical failures."""
    rows = []

    def add(status, proposer, description, config, **kw):
        e = store.add_experiment(run_id=run_id, kernel_id=kernel_id, kernel_type="matmul", proposer=proposer,
                                 status=status, description=description, config_json=json.dumps(config), **kw)
        rows.append(e)

    add("baseline", "baseline", "starting point", {"BLOCK_M": 64}, latency_us=300.0, latency_iqr_us=2.0,
        pct_peak=12.0, speedup_vs_eager=0.8)
    add("kept", "search", "bigger tile", {"BLOCK_M": 128}, latency_us=200.0, latency_iqr_us=1.0, pct_peak=18.0,
        speedup_vs_eager=1.2, speedup_vs_compile=1.1)
    add("reverted", "llm", "split-K", {"BLOCK_M": 128}, latency_us=210.0, latency_iqr_us=1.0, pct_peak=17.0)
    for i in range(3):
        add("incorrect", "llm", f"tf32 dot {i}", {"BLOCK_M": 128},
            error=f"shapes: max abs err {3.1 + i}e-02 at 4096x4096x4096 bfloat16")
    return rows


def test_loop_kernel_prompt_has_every_item(tmp_path):
    from autokernel.kernels import get_spec

    with Store(tmp_path / "ak.db") as store:
        run = store.create_run("loop", model="llama", agent="llm")
        k = store.add_kernel("llama.matmul", "matmul", model="llama", share=0.25, shapes=[SQUARE, SKINNY])
        history = _history(store, run.id, k.id)
    reverted, last_failed = history[2], history[-1]
    ctx = KernelContext(name="llama.matmul", kernel_type="matmul", backend="triton", dtype="bfloat16",
                        shapes=[SQUARE, SKINNY], weights=[32.0, 1.0], kernel_id=k.id, run_id=run.id, share=0.25,
                        ceilings=H200, device="NVIDIA H200",
                        best_per_shape=[{"shape": SQUARE, "latency_us": 250.0}, {"shape": SKINNY, "latency_us": 40.0}],
                        changes={reverted.id: "-    acc = tl.dot(a, b, acc)\n+    partial = tl.dot(a, b)  # split-K"},
                        failed_diff="--- a/kernel.py\n+++ b/kernel.py\n@@ -3 +3 @@\n-BLOCK_M = 128\n+BLOCK_M = 256")
    system, user = build_prompt(SOURCE, get_spec("matmul"), history, None, ctx, max_tokens=6000)
    # the failed candidate's diff and error
    assert "## The last candidate failed (#6, incorrect): tf32 dot 2" in user
    assert "max abs err 5.1e-02" in user and "+BLOCK_M = 256" in user
    # what each history row changed: the diff of an llm row, the config of a search row
    assert "+    partial = tl.dot(a, b)  # split-K" in user and "changed: BLOCK_M 64 -> 128" in user
    # per shape: bytes, FLOPs, roofline target in microseconds, memory- or compute-bound, best latency
    rows = [ln for ln in user.splitlines() if ln.startswith("| 4096x4096x4096") or ln.startswith("| 1x4096x4096")]
    square, skinny = (ln.split(" | ") for ln in rows)
    flops = 2 * 4096 ** 3
    assert float(square[3]) == float(f"{flops:.3g}") and square[6] == "compute"
    assert float(square[5]) == float(f"{flops / 700e12 * 1e6:.3g}")  # 196 us at 700 TFLOP/s
    assert square[7] == "250.00" and square[8].startswith("79%")
    nbytes = 2 * (4096 + 4096 * 4096 + 4096)
    assert float(skinny[2]) == float(f"{nbytes:.3g}") and skinny[6] == "memory"
    assert float(skinny[5]) == float(f"{nbytes / 4000e9 * 1e6:.3g}")
    # the measured ceilings
    assert "Ceilings, measured on this device (NVIDIA H200): copy 4000 GB/s" in user and "bfloat16 700" in user
    # the keep threshold: best 200 us, its IQR 1 us, 1% of best = 2 us -> under 198 us
    assert "under 198.00 us" in user
    # the Amdahl share
    assert "25.0% of the model's GPU time; 2x on it makes the model 1.143x faster" in user and "1.33x" in user
    # strategy by progress: far below the roofline, and three identical failures -> abandon
    assert "Far below the roofline (18%): restructure" in user
    assert "Your last 3 attempts failed the same way" in user and "Abandon that approach" in user
    # the toolchain and the answer's budget
    assert "## Toolchain\nTriton " in user and "PyTorch " in user and "up to 6000 tokens" in user
    # the judge and the playbook of the backend
    assert "five stages" in system and "Tier 1" in system and "CUDA C++ playbook" not in system
    # the anti-cheat rules of issue 19, so that an honest candidate does not trip them
    text = " ".join(system.split())
    assert "False without a reason is refused" in text and "never return a buffer you reuse" in text
    assert "at most half of your call's work" in text and "work left running on another stream" in text
    assert "sandboxed process with no network" in text and "any change to them after a call" in text
    ctx.backend = "cuda"
    system, user = build_prompt(SOURCE, get_spec("matmul"), history, None, ctx)
    assert "CUDA C++ playbook" in system and "Tier 1" not in system and "132 SMs" in system
    assert "load_extension" in user and "Backend cuda" in user


def test_kernelbench_prompt_has_the_real_judge_shapes_and_fusion(home):
    from autokernel.kb.problems import load_problems
    from autokernel.kb.runner import ProblemSpec

    problem = next(p for p in load_problems("sample", None, level=2, size="tiny") if p.problem_id == 1)
    spec = ProblemSpec(problem)
    ctx = KernelContext(name=problem.kernel_name, kernel_type="kb", backend="triton", dtype="float32", share=1.0)
    answers = [FailedAnswer("edit_failed", "edit 1: the SEARCH text starting 'x = 1' is not in the current kernel.py")]
    system, user = build_prompt("KERNEL_TYPE = 'kb'\n", spec, [], None, ctx, answers=answers)
    # KernelBench's own judge, not the bench's five stages
    assert "KernelBench's protocol" in system and "5 correctness trials" in system and "atol = rtol = 1e-4" in system
    assert "five stages" not in system and "Five stages" not in system
    # ... with the anti-cheat rules of issue 19
    text = " ".join(system.split())
    assert "same input tensors new values" in text and "The reference runs after your ModelNew" in text
    assert "over 90% of its work" in text and "must not run Model's forward" in text
    assert "sandboxed process with no network" in text
    # the problem, its shapes and its ops, and the guidance to fuse across them
    assert "class Model" in user and "## The problem's shapes" in user
    assert "Inputs (get_inputs): float32[16, 32]" in user and "Outputs: float32[16, 48]" in user
    ops = user.split("Ops in order", 1)[1]
    assert "1. linear -> float32[16, 48]" in ops and "relu -> float32[16, 48]" in ops
    assert "Minimum traffic" in user and "Fuse across them" in system
    # the failed answer is fed back
    assert "Your last answer could not be used (edit_failed)" in user and "'x = 1'" in user
