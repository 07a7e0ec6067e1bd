"""cross_entropy: spec facts, the Triton starter against the float64 reference (interpreter on CPU,
real GPU when present), the CUDA starter's compile check and, on the GPU, every default shape and
dtype for both backends.

Run as a script on a GPU (`python tests/test_kernels_cross_entropy.py [--sweep]`) it times both
starters against eager and torch.compile at the default shapes in bf16 (and with --sweep the
Triton tunables), printing one line per measurement with the fraction of the measured copy
bandwidth.
"""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F

from support.kernel_cases import BACKENDS, DEVICE, Kernel

KERNEL = "cross_entropy"
K = Kernel(KERNEL, out_shape=lambda args: (), out_dtype=torch.float32)  # a scalar fp32 loss
SPEC = K.spec
check, load_starter = K.check, K.load
triton_mod, cuda_mod = K.fixtures()  # shared checks: tests/support/kernel_cases.py


def test_spec_costs_and_shapes():
    s = {"rows": 4096, "vocab": 32000}
    K.assert_costs(s, bytes={torch.bfloat16: 4096 * 32000 * 2 + 4096 * 8 + 4},
                   flops={torch.float32: 4 * 4096 * 32000}, labels={"2048x32000", "4096x32000"})
    assert "nll_loss_forward" in SPEC.library_kernel_patterns and "masked" in SPEC.adversarial
    # What eager launches is foreign; the starters' own kernels (and a plausible candidate's) are not.
    K.assert_kernel_names(
        foreign=["void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, "
                 "long>(float*, float*, float const*, long const*, float const*, bool, long, long, long)"],
        own=("_ce_row_loss_kernel", "void ce_row_kernel<__nv_bfloat16>(__nv_bfloat16 const*, long const*, "
             "float*, long, long, long, long, bool)", "fused_log_softmax_nll", "accumulate_loss"))
    assert SPEC.parse_shape("rows=3,vocab=7") == {"rows": 3, "vocab": 7}


def test_reference_is_transformers_loss():
    """Mean over non-ignored rows of logsumexp - target logit, fp32 result for 16-bit logits."""
    gen = K.gen(0, "cpu")
    logits, targets, ignore = SPEC.make_inputs({"rows": 64, "vocab": 50}, torch.bfloat16, "cpu", gen)
    keep = targets != ignore
    assert ignore == -100 and 0 < int((~keep).sum()) < 64 and keep[0]
    per_row = torch.logsumexp(logits.double(), dim=-1) - logits.double().gather(1, targets.clamp(min=0)[:, None])[:, 0]
    expected = per_row[keep].mean()
    got = SPEC.reference(logits, targets, ignore)
    assert got.dtype == torch.float32 and got.shape == ()
    assert abs(got.item() - expected.item()) < 1e-5
    # A float64 evaluation stays float64 inside (the bench's upcast reference).
    assert abs(SPEC.reference(logits.double(), targets, ignore).item() - expected.item()) < 1e-6


def test_adversarial_inputs_mean_what_they_say():
    gen = K.gen(1, "cpu")
    v = 1000
    logits, t, _ = SPEC.make_inputs({"rows": 16, "vocab": v}, torch.float32, "cpu", gen, "equal")
    assert abs(SPEC.reference(logits, t).item() - math.log(v)) < 1e-5
    logits, t, ign = SPEC.make_inputs({"rows": 16, "vocab": v}, torch.float16, "cpu", gen, "large")
    assert torch.isfinite(logits).all() and logits.float().abs().max() > 500
    logits, t, ign = SPEC.make_inputs({"rows": 16, "vocab": v}, torch.float32, "cpu", gen, "masked")
    rows = torch.arange(16)
    assert torch.isinf(logits[:, : v // 2][rows[:, None], torch.arange(v // 2)]).float().mean() > 0.9
    assert torch.isfinite(logits[rows, t.clamp(min=0)]).all()
    assert torch.isfinite(SPEC.reference(logits, t, ign))


def test_starter_file_format():
    K.assert_starter_file("triton", {"BLOCK_V", "NUM_WARPS", "NUM_STAGES"})


test_triton_matches_reference = K.correctness_test(backend="triton", shapes=SPEC.small_shapes + SPEC.edge_shapes,
                                                   scales=("normal",) + SPEC.adversarial, seed=7)


def test_triton_strided_inputs_and_other_ignore_index(triton_mod):
    gen = K.gen(8)
    big = torch.randn(20, 2 * 700 + 5, generator=gen, device=DEVICE).to(torch.float16)
    logits = big[:, 5::2]  # column stride 2, storage offset 5
    t_big = torch.randint(0, 700, (40,), generator=gen, device=DEVICE)
    t_big[4] = 3  # ignore_index 3 below: row 2 (t_big[4]) is not counted
    targets = t_big[::2]
    for ignore in (-100, 3):
        check(triton_mod.kernel_fn(logits, targets, ignore), (logits, targets, ignore), torch.float16)
    lt = torch.randn(300, 12, generator=gen, device=DEVICE).t()  # row stride 1, column stride 12
    tt = torch.randint(0, 300, (12,), generator=gen, device=DEVICE)
    check(triton_mod.kernel_fn(lt, tt), (lt, tt, -100), torch.float32)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's 0/0 under the interpreter
def test_triton_all_ignored_is_nan_like_torch(triton_mod):
    logits = torch.randn(4, 10, device=DEVICE)
    targets = torch.full((4,), -100, device=DEVICE, dtype=torch.int64)
    assert torch.isnan(F.cross_entropy(logits, targets)) and torch.isnan(triton_mod.kernel_fn(logits, targets))


def test_triton_repeated_calls_reuse_one_prepared_plan(tmp_path):
    """A call's host work is done once per (shapes, strides, dtypes, device, ignore_index): repeated
    calls on new values stay right, and other strides or another ignore_index get plans of their own."""
    mod = load_starter("triton", None, tmp_path)
    gen = K.gen(12)
    logits, targets, _ = SPEC.make_inputs({"rows": 9, "vocab": 300}, torch.float16, DEVICE, gen)
    for _ in range(3):
        logits.normal_(generator=gen)
        targets.random_(0, 300, generator=gen)
        check(mod.kernel_fn(logits, targets), (logits, targets, -100), torch.float16)
    assert len(mod._PLANS) == 1
    targets[1] = 7
    check(mod.kernel_fn(logits, targets, 7), (logits, targets, 7), torch.float16)
    lt = logits.t().contiguous().t()  # same values, column-major
    check(mod.kernel_fn(lt, targets), (lt, targets, -100), torch.float16)
    assert len(mod._PLANS) == 3
    empty = mod.kernel_fn(logits[:0], targets[:0])
    assert empty.shape == () and torch.isnan(empty)


def test_triton_is_deterministic(triton_mod):
    gen = K.gen(9)
    args = SPEC.make_inputs({"rows": 40, "vocab": 3000}, torch.bfloat16, DEVICE, gen)
    first = triton_mod.kernel_fn(*args)
    assert torch.equal(first, triton_mod.kernel_fn(*args))


_CE_CASES = [({"rows": 24, "vocab": 2500}, torch.float32, scale) for scale in ("normal", "masked")]
test_triton_other_configs_stay_correct = K.other_configs_test(
    [({"BLOCK_V": 1024, "NUM_WARPS": 4, "MEAN_BLOCK": 256},
      _CE_CASES + [({"rows": 260, "vocab": 16}, torch.float32, "normal")]),
     ({"BLOCK_V": 2048, "NUM_STAGES": 1}, _CE_CASES)], seed=10,
    doc="Small chunks (several per row, whole -inf chunks under \"masked\") and a multi-step mean.")


def test_tolerance_rejects_a_bf16_running_sum():
    """A kernel that keeps its running sum of exponentials in bf16 (fp32 chunk sums, bf16 total)
    is off by ~8e-3 here: the 16-bit tolerance must reject it although 1e-2 would not."""
    gen = K.gen(11, "cpu")
    logits, t, ign = SPEC.make_inputs({"rows": 64, "vocab": 32000}, torch.bfloat16, "cpu", gen)
    x = logits.float()
    m = x.max(dim=-1, keepdim=True).values
    chunk_sums = torch.exp(x - m).view(64, -1, 256).sum(dim=-1)
    total = torch.zeros(64, dtype=torch.bfloat16)
    for i in range(chunk_sums.shape[1]):
        total = (total.float() + chunk_sums[:, i]).to(torch.bfloat16)
    keep = t != ign
    per_row = m[:, 0] + torch.log(total.float()) - x.gather(1, t.clamp(min=0)[:, None])[:, 0]
    sloppy = per_row[keep].mean().item()
    ref = SPEC.reference(logits.double(), t, ign).item()
    atol, rtol = SPEC.tolerance(torch.bfloat16)
    assert abs(sloppy - ref) > 2 * (atol + rtol * abs(ref)), (sloppy, ref)


# ---------------------------------------------------------------- CUDA starter

# Both halves at the default config; the device code again at the other end of the space.
test_cuda_starter_compiles = K.cuda_compile_test(other={"BLOCK_SIZE": 128, "VEC_BYTES": 4, "MEAN_THREADS": 256})

# ---------------------------------------------------------------- GPU: every default shape and dtype

test_gpu_default_shapes = K.correctness_test(backend=BACKENDS, shapes=SPEC.default_shapes + SPEC.edge_shapes,
                                             scales=("normal",) + SPEC.adversarial, seed=12, gpu=True)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
def test_gpu_deterministic_and_strided(backend):
    mod = load_starter(backend)
    gen = torch.Generator(device="cuda").manual_seed(13)
    logits, t, ign = SPEC.make_inputs({"rows": 2048, "vocab": 32000}, torch.bfloat16, "cuda", gen)
    assert torch.equal(mod.kernel_fn(logits, t, ign), mod.kernel_fn(logits, t, ign))
    wide = torch.randn(256, 32002, generator=gen, device="cuda").to(torch.bfloat16)[:, 1:32001]
    tt = torch.randint(0, 32000, (512,), generator=gen, device="cuda")[::2]
    check(mod.kernel_fn(wide, tt, -100), (wide, tt, -100), torch.bfloat16)


# ---------------------------------------------------------------- GPU timing script


if __name__ == "__main__":
    def eager(logits, targets, ignore_index=-100):
        return F.cross_entropy(logits.float(), targets, ignore_index=ignore_index)

    sweep = {"BLOCK_V": [2048, 4096, 8192, 16384], "NUM_WARPS": [4, 8, 16], "NUM_STAGES": [1, 2, 3]}
    K.bandwidth_report(eager, torch.bfloat16, sweep if "--sweep" in sys.argv else None)
