"""reduce: spec facts (O(1) row sums at every length, a tolerance that rejects 16-bit
accumulation), the Triton starter against the float64 reference (interpreter on CPU, real GPU
when present) including the split-row path, its sum_dim entry (torch.sum / torch.mean over any
dim, adjacent dims or all) against torch, the CUDA starter's compile check and, on the GPU,
every default shape and dtype for both backends.

Run as a script on a GPU (`python tests/test_kernels_reduce.py [--sweep]`) it times both starters
against eager and torch.compile at the default shapes in bf16 and fp32 (and with --sweep the
Triton tunables), printing one line per measurement with the fraction of the measured copy
bandwidth.
"""

from __future__ import annotations

import sys

import pytest
import torch

from support.kernel_cases import BACKENDS, DEVICE, Kernel

KERNEL = "reduce"
K = Kernel(KERNEL, out_shape=lambda args: (args[0].shape[0],))  # one sum per row
SPEC = K.spec
check, load_starter = K.check, K.load
triton_mod, cuda_mod = K.fixtures()  # shared checks: tests/support/kernel_cases.py


def test_spec_costs_and_shapes():
    s = {"rows": 8192, "cols": 32768}
    K.assert_costs(s, bytes={torch.float32: 4 * (8192 * 32768 + 8192)}, flops={torch.bfloat16: 8192 * 32768},
                   labels={"8192x32768", "4096x4096"})
    assert "at::native::reduce_kernel" in SPEC.library_kernel_patterns
    K.assert_kernel_names(
        foreign=["void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t"
                 "<float, at::native::sum_functor<float, float, float>::operator()>, unsigned int, float, 4> >"],
        own=("_row_sum_kernel", "void block_rows_kernel<__nv_bfloat16, __nv_bfloat16, 8>(__nv_bfloat16 const*, "
             "__nv_bfloat16*, long, long, long)", "row_reduce_sum", "accumulate_rows"))


def test_reference_accumulates_in_fp32_and_rounds_once():
    x = torch.full((1, 4096), 1.0, dtype=torch.bfloat16)
    x[0, 0] = 256.0  # bf16 accumulation would stall at 256 (+1 rounds away); fp32 does not
    assert SPEC.reference(x).item() == 4352.0  # 4351 rounded once to bf16 (spacing 32 there)
    assert SPEC.reference(x).dtype == torch.bfloat16
    assert SPEC.reference(x.double()).item() == 4351.0


@pytest.mark.parametrize("cols", [1, 100, 32768])
def test_row_sums_are_order_one_at_every_length(cols):
    gen = torch.Generator().manual_seed(cols)
    (x,) = SPEC.make_inputs({"rows": 256, "cols": cols}, torch.float32, "cpu", gen)
    std = SPEC.reference(x).std().item()
    assert 0.7 < std < 1.3, std


def test_tolerance_rejects_16_bit_accumulation():
    """A running total kept in bf16 along a 32768-long row is off by ~eps16 * sqrt(cols / 2) ~ 0.25:
    the tolerance rejects it on most rows; the fp32-accumulated result passes."""
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(7)
    (x,) = SPEC.make_inputs({"rows": 8, "cols": 32768}, dtype, "cpu", gen)
    cols = x.float().t().contiguous()
    total = torch.zeros(8, dtype=dtype)
    for i in range(cols.shape[0]):
        total = (total.float() + cols[i]).to(dtype)
    ref = SPEC.reference(x.double())
    atol, rtol = SPEC.tolerance(dtype)
    over = (total.double() - ref).abs() > atol + rtol * ref.abs()
    assert over.sum().item() >= 4, "16-bit accumulation should fail the tolerance"
    torch.testing.assert_close(SPEC.reference(x).double(), ref, atol=atol, rtol=rtol)


def test_starter_file_format():
    kf = K.assert_starter_file("triton", {"BLOCK_C", "TILE", "NUM_WARPS", "MIN_PROGRAMS", "INNER_BLOCK", "COL_TILE"})
    assert load_starter("triton").valid_config(dict(kf.config))


test_triton_matches_reference = K.correctness_test(backend="triton", shapes=SPEC.small_shapes + SPEC.edge_shapes,
                                                   scales=("normal",) + SPEC.adversarial, seed=8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_strided_and_split_rows_are_deterministic(triton_mod, dtype):
    """A transposed x, a column-strided slice with an offset, and the split path (few long rows)
    gives the same bits as the same values laid out contiguously."""
    gen = torch.Generator(device=DEVICE).manual_seed(9)
    (x,) = SPEC.make_inputs({"rows": 3, "cols": 9000}, dtype, DEVICE, gen)
    out = triton_mod.kernel_fn(x)
    check(out, (x,), dtype)
    assert torch.equal(out, triton_mod.kernel_fn(x.t().contiguous().t()))
    wide = torch.randn(5, 2 * 700 + 1, generator=gen, device=DEVICE).to(dtype)
    sl = wide[:, 1::2]
    check(triton_mod.kernel_fn(sl), (sl,), dtype)


# ---------------------------------------------------------------- sum_dim: any dim, read in place

def sum_dim_calls(mod, monkeypatch):
    """The segment counts of sum_dim's column launches (one launch: no split; a split launches
    the partial sums, then their sum)."""
    real, calls = mod._launch_cols, []

    def spy(x3, out, n_seg, *args):
        calls.append(n_seg)
        return real(x3, out, n_seg, *args)

    monkeypatch.setattr(mod, "_launch_cols", spy)
    return calls


def check_sum_dim(mod, x, dim, keepdim=False, mean=False):
    out = mod.sum_dim(x, dim, keepdim, mean)
    ref = x.double().mean(dim, keepdim=keepdim) if mean else x.double().sum(dim, keepdim=keepdim)
    assert out.shape == ref.shape and out.dtype == x.dtype
    atol, rtol = SPEC.tolerance(x.dtype)
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=rtol)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape, dim, keepdim, segments", [
    ((3, 37, 10), 0, False, [1]),  # R = 3: one tile of rows, no split
    ((3, 37, 10), 1, True, [1]),  # one [64, 16] tile
    ((3, 300, 10), 1, True, [2, 1]),  # R = 2 tiles of 256 rows, 3 programs: split in two
    ((3, 37, 10), 2, False, []),  # the last dim: the row kernel
    ((2, 700, 130), 1, False, [22, 1]),  # inner 130: a full block of 128 and a ragged one of 2
    ((2, 700, 130), 0, True, [1]),
    ((2, 700, 130), -1, True, []),
    ((5, 4, 300), 1, False, [1]),
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else None)
def test_sum_dim_matches_torch_sum(triton_mod, monkeypatch, dtype, shape, dim, keepdim, segments):
    """Each dim of a 3-D x reduced in place ([outer, R, inner] tiles, coalesced along inner), the R
    split into segments when too few programs would run, bitwise the same on a second call."""
    calls = sum_dim_calls(triton_mod, monkeypatch)
    x = torch.randn(shape, generator=K.gen(13), device=DEVICE).to(dtype)
    out = check_sum_dim(triton_mod, x, dim, keepdim)
    assert calls == segments
    assert torch.equal(out, triton_mod.sum_dim(x, dim, keepdim))


def test_sum_dim_mean_adjacent_dims_all_and_views(triton_mod):
    """mean divides in fp32 before rounding: an fp16 mean whose sum would overflow fp16 is finite;
    adjacent dims as one R; all of x as one row (split into segments when long); strided views;
    empty reductions (sum 0, mean nan, as torch)."""
    mod = triton_mod
    gen = K.gen(14)
    x = torch.randn(4, 6, 5, 7, generator=gen, device=DEVICE)
    for dim in ((1, 2), (2, 3), (0, 1, 2), 3, -3):
        for mean in (False, True):
            check_sum_dim(mod, x, dim, keepdim=mean, mean=mean)
    big = torch.full((3, 4096, 2), 60000.0, dtype=torch.float16, device=DEVICE)
    assert torch.equal(mod.sum_dim(big, 1, mean=True), torch.full((3, 2), 60000.0, dtype=torch.float16))
    assert torch.equal(mod.sum_dim(big, None, mean=True), torch.tensor(60000.0, dtype=torch.float16))
    long = torch.randn(9000, generator=gen, device=DEVICE)  # 5 chunks of one row: split
    for mean in (False, True):
        out = mod.sum_dim(long, None, mean=mean)
        assert out.shape == ()
        torch.testing.assert_close(out.double(), long.double().mean() if mean else long.double().sum(),
                                   atol=1e-4, rtol=1e-4)
    check_sum_dim(mod, torch.randn(3, 2, 4, generator=gen, device=DEVICE), None, keepdim=True)
    # strided views read as they are: every other inner column, and x permuted (inner stride 24)
    check_sum_dim(mod, torch.randn(4, 6, 14, generator=gen, device=DEVICE)[:, :, ::2], 1)
    check_sum_dim(mod, torch.randn(7, 6, 4, generator=gen, device=DEVICE).permute(2, 1, 0), 1)
    check_sum_dim(mod, x.transpose(0, 2)[:, 1:], 1, mean=True)  # no [outer, R, inner] view: one copy
    assert torch.equal(mod.sum_dim(torch.empty(0, 3, device=DEVICE), 0), torch.zeros(3))
    assert torch.isnan(mod.sum_dim(torch.empty(0, 3, device=DEVICE), 0, mean=True)).all()
    assert mod.sum_dim(torch.empty(3, 0, 2, device=DEVICE), 0).shape == (0, 2)


def test_sum_dim_at_other_configs(tmp_path):
    """Narrow column blocks and small tiles (many column blocks, many segments), and no split."""
    x = torch.randn(3, 301, 77, generator=K.gen(15), device=DEVICE)
    for cfg in ({"INNER_BLOCK": 32, "COL_TILE": 1024, "NUM_WARPS": 2, "MIN_PROGRAMS": 264},
                {"INNER_BLOCK": 512, "COL_TILE": 16384, "NUM_WARPS": 16, "MIN_PROGRAMS": 264}):
        mod = K.load("triton", cfg, tmp_path)
        assert mod.valid_config({**{k: getattr(mod, k) for k in mod.SEARCH_SPACE}, **cfg})
        for dim in (0, 1):
            check_sum_dim(mod, x, dim, mean=dim == 1)


test_triton_other_configs_stay_correct = K.other_configs_test(
    [(cfg, [(shape, torch.float32, "normal") for shape in ({"rows": 2, "cols": 3000}, {"rows": 40, "cols": 1100})])
     for cfg in ({"BLOCK_C": 512, "TILE": 2048, "NUM_WARPS": 2, "MIN_PROGRAMS": 264},
                 {"BLOCK_C": 8192, "TILE": 16384, "NUM_STAGES": 1, "MIN_PROGRAMS": 264})], seed=10,
    doc="Small chunks (multi-chunk loops, packed short rows, many segments) and no split at all.")

# ---------------------------------------------------------------- CUDA starter

# Both halves at the default config; the device code again at the other end of the space.
test_cuda_starter_compiles = K.cuda_compile_test(
    other={"BLOCK_SIZE": 1024, "VEC_BYTES": 4, "SHORT_COLS": 256, "WARPS_PER_BLOCK": 16, "MIN_BLOCKS": 264})

# ---------------------------------------------------------------- GPU: every default shape and dtype

test_gpu_default_shapes = K.correctness_test(backend=BACKENDS, shapes=SPEC.default_shapes + SPEC.edge_shapes,
                                             scales=("normal",) + SPEC.adversarial, seed=11, gpu=True)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("shape", [{"rows": 1, "cols": 10_000_000}, {"rows": 7, "cols": 333_333},
                                   {"rows": 100_000, "cols": 37}], ids=SPEC.shape_label)
def test_gpu_split_and_packed_paths(backend, shape):
    """Few very long rows (split into segments), and many short ones (packed), reproducibly."""
    mod = load_starter(backend)
    gen = torch.Generator(device="cuda").manual_seed(12)
    args = SPEC.make_inputs(shape, torch.bfloat16, "cuda", gen)
    out = mod.kernel_fn(*args)
    check(out, args, torch.bfloat16)
    assert torch.equal(out, mod.kernel_fn(*args))


# ---------------------------------------------------------------- GPU timing script


if __name__ == "__main__":
    from autokernel.kernels.reduce import reference as eager

    sweep = {"BLOCK_C": [2048, 4096, 8192], "TILE": [4096, 8192, 16384], "NUM_WARPS": [4, 8, 16]}
    for dt in (torch.bfloat16, torch.float32):
        K.bandwidth_report(eager, dt, sweep if "--sweep" in sys.argv else None)
