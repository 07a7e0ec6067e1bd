"""softmax: spec facts, the Triton starter against the float64 reference (interpreter on the CPU,
the real GPU when present) at small, edge and adversarial inputs and strided views, the CUDA
starter's compile check and, on the GPU, both backends at every default shape and dtype."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from support.kernel_cases import Kernel, row_kernel_configs, skip_cuda_without_toolchain, skip_long_bf16_rows

K = Kernel("softmax")
SPEC = K.spec
triton_mod, cuda_mod = K.fixtures(own_home=True)  # shared checks: tests/support/kernel_cases.py


def test_spec_facts():
    s = {"rows": 4096, "cols": 32000}
    K.assert_costs(s, bytes={torch.bfloat16: 2 * 4096 * 32000 * 2}, flops={torch.float32: 5 * 4096 * 32000},
                   labels={"4096x32000", "65536x2048"})
    assert "-inf" in SPEC.adversarial and SPEC.tolerance("fp32") == (1e-4, 1e-4)
    # The bench's matcher takes our kernels (Triton and CUDA names) as our own.
    K.assert_kernel_names(own=("_softmax_fused", "_softmax_looped",
                               "void softmax_kernel<__nv_bfloat16>(__nv_bfloat16 const*)"))
    x = K.inputs({"rows": 3, "cols": 7}, torch.float32, device="cpu")[0]
    assert torch.equal(SPEC.reference(x), F.softmax(x, dim=-1))


def test_adversarial_inputs():
    x = K.inputs({"rows": 16, "cols": 64}, torch.float32, "-inf", device="cpu")[0]
    finite = torch.isfinite(x)
    assert finite.any(dim=1).all(), "every row keeps a finite logit"
    assert not finite[:, :32].all(dim=1).any() and (~finite).float().mean() > 0.5
    big = K.inputs({"rows": 4, "cols": 64}, torch.float16, "large", device="cpu")[0]
    assert torch.isfinite(big).all() and big.abs().max() > 500
    eq = K.inputs({"rows": 4, "cols": 64}, torch.bfloat16, "equal", device="cpu")[0]
    assert (eq == 0.5).all()


test_triton_shapes = K.correctness_test(backend="triton", shapes=SPEC.small_shapes + SPEC.edge_shapes,
                                        skip=skip_long_bf16_rows)
test_triton_adversarial = K.adversarial_test([{"rows": 7, "cols": 1000}, {"rows": 37, "cols": 129}])


def test_triton_repeated_calls_reuse_one_prepared_plan(tmp_path):
    """A call's host work is done once per (shape, strides, dtype, device, log): repeated calls on new
    values stay right; other strides and log-softmax each get a plan, long rows the looped path."""
    mod = K.load("triton", None, tmp_path)
    (x,) = K.inputs({"rows": 6, "cols": 96}, torch.float32)[:1]
    for _ in range(3):
        x.normal_()
        K.check(mod.kernel_fn(x), (x,), torch.float32)
    assert len(mod._PLANS) == 1
    xt = x.t().contiguous().t()
    K.check(mod.kernel_fn(xt), (xt,), torch.float32)
    torch.testing.assert_close(mod.kernel_fn(x, True), torch.log_softmax(x, -1), atol=1e-5, rtol=1e-5)
    assert len(mod._PLANS) == 3
    long = torch.randn(2, mod.MAX_FUSED_COLS + 8, device=x.device)
    torch.testing.assert_close(mod.kernel_fn(long), torch.softmax(long, -1), atol=1e-5, rtol=1e-5)


def test_triton_long_rows_masked(triton_mod):
    """The looping path with a leading chunk that is -inf everywhere."""
    args = K.inputs({"rows": 2, "cols": 40000}, torch.float32, "-inf")
    assert torch.isinf(args[0][:, :4096]).all()
    K.check(triton_mod.kernel_fn(*args), args, torch.float32)


test_triton_strided_views = K.strided_views_test()
# SCHEDULE persistent: 4 programs (the interpreter's "SMs" x 1) walk 5 tiles of 8 rows at 33x100
test_triton_configs = K.configs_test(row_kernel_configs(max_fused_cols=8192)
                                     + [{"SCHEDULE": "persistent", "PROGRAMS_PER_SM": 1, "TILE_ELEMS": 1024}])
# The other end of the search space compiles too (scalar loads in every dtype).
test_cuda_source_compiles = K.cuda_compile_test(other={"BLOCK_SIZE": 128, "VEC_BYTES": 4})

# ---------------------------------------------------------------- GPU: both backends, every default shape and dtype

test_gpu_default_shapes = K.correctness_test(backend=("triton", "cuda"), shapes=SPEC.default_shapes, gpu=True,
                                             skip=skip_cuda_without_toolchain)
test_gpu_edges_and_scales = K.gpu_edges_and_scales_test({"rows": 64, "cols": 32000})


SM90_SCRIPT = r'''
import importlib, json, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource

def compile_sm90(modname, fname, sig, consts, warps, div16):
    fn = getattr(importlib.import_module(modname), fname)
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}  # what a launch specialises
    # constexprs keyed by argument position, as the launcher does, and every one given (Triton 3.9
    # takes no names and no missing constexpr)
    consts = {(names.index(n),): v for n, v in consts.items()}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    ptx = k.asm["ptx"]
    p = get_ptxas(90)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    r = subprocess.run([getattr(p, "path", p), "-v", "--gpu-name=sm_90a", f.name, "-o", "/dev/null"],
                       capture_output=True, text=True)
    spill = sum(int(x) for x in re.findall(r"(\d+) bytes spill", r.stderr))
    regs = [int(x) for x in re.findall(r"Used (\d+) registers", r.stderr)]
    return {"v4_ld": len(re.findall(r"ld\.global(?:\.\w+)*\.v4", ptx)),
            "v4_st": len(re.findall(r"st\.global(?:\.\w+)*\.v4", ptx)),
            "spill": spill, "regs": regs[0] if regs else None, "ok": r.returncode == 0}

S = "autokernel.kernels."
out = {}
for dt in ("bf16", "fp32"):
    sig = {"x_ptr": f"*{dt}", "y_ptr": f"*{dt}", "rows": "i32", "cols": "i32", "sxr": "i32", "sxc": "constexpr",
           "syr": "i32", "tiles": "i32", "ROWS": "constexpr", "BLOCK_N": "constexpr", "LOG": "constexpr",
           "PERSISTENT": "constexpr"}
    div = ["x_ptr", "y_ptr", "cols", "sxr", "syr"]
    out[f"softmax_32000_{dt}"] = compile_sm90(S + "softmax.triton_starter", "_softmax_fused", sig, {"sxc": 1, "ROWS": 1, "BLOCK_N": 32768, "LOG": False, "PERSISTENT": False}, 32, div)
    out[f"softmax_2048_{dt}"] = compile_sm90(S + "softmax.triton_starter", "_softmax_fused", sig, {"sxc": 1, "ROWS": 2, "BLOCK_N": 2048, "LOG": False, "PERSISTENT": False}, 8, div)
    out[f"softmax_2048_persistent_{dt}"] = compile_sm90(S + "softmax.triton_starter", "_softmax_fused", sig, {"sxc": 1, "ROWS": 2, "BLOCK_N": 2048, "LOG": False, "PERSISTENT": True}, 8, div)
    sig = {"x_ptr": f"*{dt}", "w_ptr": f"*{dt}", "b_ptr": f"*{dt}", "y_ptr": f"*{dt}", "rows": "i32", "cols": "i32",
           "eps": "fp32", "sxr": "i32", "sxc": "constexpr", "sw": "constexpr", "sb": "constexpr", "syr": "i32",
           "ROWS": "constexpr", "BLOCK_N": "constexpr", "SHIFTED": "constexpr", "EVEN": "constexpr"}
    out[f"layernorm_4096_{dt}"] = compile_sm90(S + "layernorm.triton_starter", "_layernorm_fused", sig,
        {"sxc": 1, "sw": 1, "sb": 1, "ROWS": 1, "BLOCK_N": 4096, "SHIFTED": False, "EVEN": True}, 16, ["x_ptr", "w_ptr", "b_ptr", "y_ptr", "cols", "sxr", "syr"])
    sig = {"x_ptr": f"*{dt}", "w_ptr": f"*{dt}", "y_ptr": f"*{dt}", "rows": "i32", "cols": "i32", "eps": "fp32",
           "sxr": "i32", "sxc": "constexpr", "sw": "constexpr", "syr": "i32", "tiles": "i32", "ROWS": "constexpr",
           "BLOCK_N": "constexpr", "PERSISTENT": "constexpr"}
    for persistent in (False, True):
        out[f"rmsnorm_4096_{dt}" + ("_persistent" if persistent else "")] = compile_sm90(S + "rmsnorm.triton_starter", "_rmsnorm_fused", sig,
            {"sxc": 1, "sw": 1, "ROWS": 1, "BLOCK_N": 4096, "PERSISTENT": persistent}, 16, ["x_ptr", "w_ptr", "y_ptr", "cols", "sxr", "syr"])
print(json.dumps(out))
'''


@pytest.mark.slow
def test_triton_starters_compile_for_sm90_vectorized_without_spills():
    """Without a GPU: the softmax/layernorm/rmsnorm starters' LLaMA-shape configurations (and the
    persistent schedule of softmax and rmsnorm) compile
    for sm_90 (the H200) with 16-byte loads and stores and no register spills, which is what
    the bandwidth targets rest on. Runs in a subprocess: the interpreter is off there."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", SM90_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 12  # 8 + the persistent schedules of softmax and rmsnorm in both dtypes
    for name, r in results.items():
        assert r["ok"] and r["spill"] == 0, (name, r)
        assert r["v4_ld"] >= 1 and r["v4_st"] >= 1, (name, r)
        assert r["regs"] is not None and r["regs"] * 1024 <= 65536, (name, r)
