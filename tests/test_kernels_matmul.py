"""matmul: spec facts, the Triton starter against the float64 reference (interpreter on CPU, real
GPU when present), the CUDA starter's compile check and, on the GPU, every default shape and dtype."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from support.kernel_cases import ALL_DTYPES, CPU_DTYPES, DEVICE, Kernel

K = Kernel("matmul")
SPEC = K.spec
check = K.check
triton_mod, cuda_mod = K.fixtures()  # shared checks: tests/support/kernel_cases.py


def test_spec_costs_and_shapes():
    s = {"M": 2048, "N": 11008, "K": 4096}
    K.assert_costs(s, flops={torch.bfloat16: 2 * 2048 * 11008 * 4096},
                   bytes={torch.bfloat16: 2 * (2048 * 4096 + 4096 * 11008 + 2048 * 11008)},
                   labels={"2048x4096x4096", "2048x11008x4096", "2048x4096x11008", "2048x32000x4096",
                           "4096x4096x4096"})
    assert SPEC.bytes(s, torch.float32) == 2 * SPEC.bytes(s, torch.float16)
    assert SPEC.compute_bound and "nvjet" in SPEC.library_kernel_patterns
    assert SPEC.parse_shape("17x33x40") == {"M": 17, "N": 33, "K": 40}


@pytest.mark.parametrize("scale", ["normal", "large", "tiny"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_inputs_are_linear_layer_like_with_unit_outputs(dtype, scale):
    a, b = K.inputs({"M": 64, "N": 96, "K": 512}, dtype, scale, seed=1, device="cpu")
    assert a.shape == (64, 512) and b.shape == (512, 96) and a.dtype == b.dtype == dtype
    assert b.stride() == (1, 512)  # the .t() view of an nn.Linear weight
    out_std = SPEC.reference(a.double(), b.double()).std().item()
    # Outputs O(1) at every scale so tolerances stay meaningful; fp16 "tiny" can only compensate
    # 1e-6 inputs by 1e4 (its range ends at 65504), so its outputs are ~1e-2.
    expected = 1e-2 if (dtype, scale) == (torch.float16, "tiny") else 1.0
    assert 0.3 * expected < out_std < 3.0 * expected, out_std
    if scale == "large":
        assert a.float().abs().max() > 1e3
    if scale == "tiny":
        assert a.float().abs().max() < 1e-4


def test_equal_scale_gives_equal_rows():
    a, b = K.inputs({"M": 5, "N": 7, "K": 9}, torch.float32, "equal", seed=2, device="cpu")
    ref = SPEC.reference(a, b)
    torch.testing.assert_close(ref, ref[:1].expand_as(ref))  # CPU BLAS blocking may differ in the last bit


def test_starter_file_format():
    kf = K.assert_starter_file("triton", {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "NUM_WARPS", "NUM_STAGES"})
    assert (kf.config["BLOCK_M"], kf.config["BLOCK_N"], kf.config["BLOCK_K"]) == (256, 128, 64)


test_triton_matches_reference = K.correctness_test(
    backend="triton", shapes=SPEC.small_shapes + SPEC.edge_shapes, dtypes=CPU_DTYPES,
    scales=("normal",) + SPEC.adversarial, seed=lambda s: hash(SPEC.shape_label(s)) % 1000)


@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_triton_layouts(triton_mod, dtype):
    """Contiguous b, transposed b, row-strided a (a slice), and offset storage all read by stride."""
    gen = K.gen(3)
    m, n, k = 37, 45, 70
    a_big = torch.randn(m, 2 * k + 3, generator=gen, device=DEVICE).to(dtype)
    a = a_big[:, 3:3 + 2 * k:2]  # column stride 2, storage offset 3
    w = (torch.randn(n, k, generator=gen, device=DEVICE) / math.sqrt(k)).to(dtype)
    for b in (w.t(), w.t().contiguous(), w.t().contiguous()[:, : n - 4]):
        check(triton_mod.kernel_fn(a, b), (a, b), dtype)


test_triton_other_configs_stay_correct = K.other_configs_test(
    [(cfg, [({"M": 70, "N": 130, "K": 100}, dtype, "normal") for dtype in CPU_DTYPES])
     for cfg in ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1},
                 {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 4,
                  "FP32_BLOCK_M": 32, "FP32_BLOCK_N": 32, "FP32_BLOCK_K": 16})],
    seed=4, check_valid=True,
    doc="Points of the search space a proposer will try: smaller tiles, no grouping, odd K tails.")


def test_triton_tma_variant(tmp_path):
    """VARIANT "tma": tensor-descriptor loads where the operands qualify (16-byte aligned rows),
    the pointer kernel where they do not; both correct, with both B layouts and ragged edges."""
    mod = K.load("triton", {"VARIANT": "tma", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, tmp_path)
    gen = K.gen(21)
    a, b = K.make({"M": 100, "N": 72, "K": 136}, torch.float16, gen)
    assert mod._tma_ok(a, 1) and mod._tma_ok(b.t(), 1) and mod._tma_ok(b.contiguous(), 1)
    for bb in (b, b.contiguous()):
        check(mod.kernel_fn(a, bb), (a, bb), torch.float16)
    a, b = K.make({"M": 17, "N": 33, "K": 40 + 3}, torch.float16, gen)
    assert not mod._tma_ok(a, 1)  # 86-byte rows: falls back to the pointer kernel
    check(mod.kernel_fn(a, b), (a, b), torch.float16)
    a, b = K.make({"M": 16, "N": 32, "K": 64}, torch.float32, gen)
    check(mod.kernel_fn(a, b), (a, b), torch.float32)  # fp32 always takes the ieee pointer kernel


def test_valid_config_rejects_what_hopper_cannot_hold(triton_mod):
    kf = K.kernel_file("triton")
    assert triton_mod.valid_config(dict(kf.config))
    assert not triton_mod.valid_config(dict(kf.config, BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, NUM_STAGES=5))
    assert not triton_mod.valid_config(dict(kf.config, BLOCK_M=256, BLOCK_N=256, BLOCK_K=32, NUM_WARPS=4,
                                            NUM_STAGES=2))


# ---------------------------------------------------------------- GPU: every default shape and dtype

test_triton_gpu_default_shapes = K.correctness_test(backend="triton", shapes=SPEC.default_shapes + SPEC.edge_shapes,
                                                    seed=5, gpu=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SPEC.default_shapes + SPEC.edge_shapes + [{"M": 100, "N": 72, "K": 136}],
                         ids=SPEC.shape_label)
def test_triton_tma_gpu_shapes(tmp_path, shape, dtype):
    mod = K.load("triton", {"VARIANT": "tma"}, tmp_path)
    a, b = K.make(shape, dtype, K.gen(22, "cuda"), device="cuda")
    for bb in (b, b.contiguous()):
        check(mod.kernel_fn(a, bb), (a, bb), dtype)


test_triton_gpu_adversarial = K.gpu_scales_test("triton", {"M": 512, "N": 1024, "K": 4096}, seed=6)

# ---------------------------------------------------------------- CUDA C++ starter


def test_cuda_starter_file_format(cuda_mod):
    kf = K.assert_starter_file("cuda")
    assert cuda_mod.valid_config(dict(kf.config))
    assert not cuda_mod.valid_config(dict(kf.config, BLOCK_M=256, BLOCK_N=256, BLOCK_K=64))  # > 48 KB static smem
    assert cuda_mod.valid_config(dict(kf.config, BLOCK_M=64, WARPS_M=4, BLOCK_N=64, WARPS_N=2, BLOCK_K=16))
    assert not cuda_mod.valid_config(dict(kf.config, BLOCK_N=64, WARPS_N=8))  # 8-column warp tiles: not WMMA
    assert cuda_mod._defines() == {k: kf.config[k] for k in cuda_mod._defines()}


# nvcc plus a C++ syntax check against torch headers: minutes on 2 cores
test_cuda_sources_compile = K.cuda_compile_test(slow=True)
test_cuda_gpu_shapes = K.correctness_test(backend="cuda", shapes=SPEC.default_shapes + SPEC.small_shapes
                                          + SPEC.edge_shapes, seed=12, gpu=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cuda_gpu_adversarial_and_layouts(cuda_mod, dtype):
    gen = K.gen(13, "cuda")
    K.check_cases(cuda_mod, [({"M": 300, "N": 1000, "K": 4096}, s) for s in SPEC.adversarial], dtype, gen)
    a, b = K.make({"M": 129, "N": 257, "K": 200}, dtype, gen, device="cuda")
    for bb in (b, b.contiguous(), b.contiguous()[:, 3:], b[5:, :]):
        aa = a[:, : bb.shape[0]]
        check(cuda_mod.kernel_fn(aa, bb), (aa, bb), dtype)
    a_t = a.t().contiguous().t()  # column-major A: scalar-load path
    check(cuda_mod.kernel_fn(a_t, b), (a_t, b), dtype)


# ---------------------------------------------------------------- speed report (script, not a test)
# python3 tests/test_kernels_matmul.py [--sweep]   (on the GPU; writes $OUT/matmul_speed.txt)


def sweep(mods, gen, emit) -> None:
    import tempfile
    from pathlib import Path

    tmp = Path(tempfile.mkdtemp())
    base = mods["triton"]
    kf = K.kernel_file("triton")
    shapes = [SPEC.default_shapes[0], SPEC.default_shapes[2], SPEC.default_shapes[4]]
    inputs = [SPEC.make_inputs(s, torch.bfloat16, "cuda", gen) for s in shapes]
    tiles = ((128, 256, 64), (256, 128, 64), (128, 128, 64), (128, 256, 32), (128, 128, 128))
    for variant, (bm, bn, bk), warps, stages in itertools.product(("pointer", "tma"), tiles, (4, 8), (3, 4)):
        cfg = dict(kf.config, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, NUM_WARPS=warps, NUM_STAGES=stages,
                   VARIANT=variant)
        if not base.valid_config(cfg):
            continue
        row = f"sweep bf16 {variant} {bm}x{bn}x{bk} W{warps} S{stages}"
        try:
            mod = K.load("triton", cfg, tmp)
            for s, args in zip(shapes, inputs):
                row += f" | {SPEC.shape_label(s)} {K.tflops(mod.kernel_fn, args, s, torch.bfloat16):6.1f}"
        except Exception as exc:
            row += f" | failed {type(exc).__name__}: {str(exc)[:120]}"
        emit(row)


def main(argv: list[str]) -> None:
    K.tflops_report("torch", sweep if "--sweep" in argv else None)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])


@pytest.mark.parametrize("dtype", ALL_DTYPES if DEVICE == "cuda" else CPU_DTYPES)  # bf16 dots: GPU only
def test_triton_bmm_runs_the_batch_in_one_launch(triton_mod, dtype):
    """bmm (KernelBench's batched problems): every batch entry right, with K tails, a per-entry
    transposed B and a non-contiguous A, from one launch whose grid axis 1 is the batch."""
    gen = torch.Generator(device=DEVICE).manual_seed(11)
    a = torch.randn(3, 70, 100, generator=gen, device=DEVICE).to(dtype)
    bt = torch.randn(3, 90, 100, generator=gen, device=DEVICE).to(dtype)
    a_nc = torch.randn(3, 100, 70, generator=gen, device=DEVICE).to(dtype).transpose(1, 2)
    launches = []
    kernel = triton_mod._matmul_tile_kernel

    class Count:
        def __getitem__(self, grid):
            launches.append(grid)
            return kernel[grid]

    triton_mod._matmul_tile_kernel = Count()
    try:
        for x, y in ((a, bt.transpose(1, 2)), (a_nc, bt.transpose(1, 2).contiguous())):
            out = triton_mod.bmm(x, y)
            assert out.shape == (3, 70, 90) and out.dtype == dtype
            ref = torch.bmm(x.double(), y.double())
            atol, rtol = SPEC.tolerance(dtype)
            torch.testing.assert_close(out.double(), ref, atol=atol, rtol=rtol)
    finally:
        triton_mod._matmul_tile_kernel = kernel
    assert [g[1] for g in launches] == [3, 3]  # the batch is the grid's second axis, one launch each
    with pytest.raises(AssertionError, match="a\\[B,M,K\\]"):
        triton_mod.bmm(a, bt)


# -- awkward shapes: matrix-vector, few tiles with a long K, unaligned rows ------------------------------

def _spy_launches(mod, monkeypatch):
    """Records (kernel name, grid) of every launch of the starter's kernels, then launches for real."""
    seen = []
    for name in ("_matmul_tile_kernel", "_gemv_kernel", "_sum_splits_kernel"):
        real = getattr(mod, name)

        class Spy:
            def __init__(self, name, real):
                self.name, self.real = name, real

            def __getitem__(self, grid):
                def run(*args, **kw):
                    seen.append((self.name, tuple(grid), args))
                    return self.real[grid](*args, **kw)
                return run

        monkeypatch.setattr(mod, name, Spy(name, real))
    return seen


@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_triton_matrix_vector_takes_the_gemv_path(tmp_path, monkeypatch, dtype):
    mod = K.load("triton", {"GEMV_BLOCK_M": 4, "GEMV_BLOCK_K": 128, "SPLIT_K_MIN_CHUNK": 512}, tmp_path)
    seen = _spy_launches(mod, monkeypatch)
    gen = K.gen(31)
    a = torch.randn(37, 3000, generator=gen, device=DEVICE).to(dtype)
    for b in (torch.randn(3000, 1, generator=gen, device=DEVICE).to(dtype),
              torch.randn(1, 3000, generator=gen, device=DEVICE).to(dtype).t()):
        check(mod.kernel_fn(a, b), (a, b), dtype)
    names = [s[0] for s in seen]
    assert names == ["_gemv_kernel", "_sum_splits_kernel"] * 2
    grid = seen[0][1]
    assert grid[0] == 10 and grid[1] == 5  # 37 rows / 4 per program; K split to fill SPLIT_K_PROGRAMS


@pytest.mark.parametrize("split", ["auto", "off"])
def test_triton_split_k_for_few_tiles_and_a_long_k(tmp_path, monkeypatch, split):
    mod = K.load("triton", {"SPLIT_K": split, "SPLIT_K_MIN_CHUNK": 1024, "FP32_BLOCK_M": 32, "FP32_BLOCK_N": 32,
                            "FP32_BLOCK_K": 16, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, tmp_path)
    seen = _spy_launches(mod, monkeypatch)
    gen = K.gen(32)
    for dtype in CPU_DTYPES:
        a, b = K.make({"M": 40, "N": 50, "K": 5000}, dtype, gen)  # 4 tiles, K tail of 5000 % 1024
        check(mod.kernel_fn(a, b), (a, b), dtype)
    tile_grids = [g for name, g, _ in seen if name == "_matmul_tile_kernel"]
    if split == "auto":
        assert all(g[2] == 4 for g in tile_grids)  # min(264 / tiles, 5000 // 1024) splits
        assert [n for n, _, _ in seen].count("_sum_splits_kernel") == len(CPU_DTYPES)
    else:
        assert all(len(g) == 1 for g in tile_grids)
        assert all(n == "_matmul_tile_kernel" for n, _, _ in seen)


def test_triton_split_k_only_below_one_wave_of_tiles(tmp_path, monkeypatch):
    """SPLIT_K_BELOW_TILES = 1: one tile (fp16) or four (fp32) already make a full wave, so no split;
    the K tail (5000 % 16, 5000 % 32) lands in the peeled masked step."""
    mod = K.load("triton", {"SPLIT_K_BELOW_TILES": 1, "SPLIT_K_MIN_CHUNK": 1024, "FP32_BLOCK_M": 32,
                            "FP32_BLOCK_N": 32, "FP32_BLOCK_K": 16, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32},
                  tmp_path)
    seen = _spy_launches(mod, monkeypatch)
    gen = K.gen(34)
    for dtype in CPU_DTYPES:
        a, b = K.make({"M": 40, "N": 50, "K": 5000}, dtype, gen)
        check(mod.kernel_fn(a, b), (a, b), dtype)
    assert [n for n, _, _ in seen] == ["_matmul_tile_kernel"] * len(CPU_DTYPES)
    assert all(len(g) == 1 for _, g, _ in seen)


@pytest.mark.parametrize("pad", ["pad", "as_is"])
def test_triton_unaligned_rows_are_padded(tmp_path, monkeypatch, pad):
    """K = 101: rows of A (and of B.T) start at addresses Triton cannot prove 16-byte aligned; "pad"
    hands the kernel copies whose row strides are multiples of 16, "as_is" the tensors themselves."""
    mod = K.load("triton", {"PAD_UNALIGNED": pad, "SPLIT_K": "off"}, tmp_path)
    monkeypatch.setattr(mod, "PAD_MIN_ELEMS", 0)  # these operands are small: padding them is switched off
    seen = _spy_launches(mod, monkeypatch)
    gen = K.gen(33)
    for dtype in CPU_DTYPES:
        a, b = K.make({"M": 70, "N": 77, "K": 101}, dtype, gen)
        check(mod.kernel_fn(a, b), (a, b), dtype)
    strides = [(args[0].stride(0), args[1].stride()) for name, _, args in seen]
    if pad == "pad":
        assert all(sa == 112 for sa, _ in strides)
        assert all(max(sb) % 16 == 0 and min(sb) == 1 for _, sb in strides)
    else:
        assert all(sa == 101 for sa, _ in strides)


def test_triton_small_unaligned_operands_are_used_as_they_are(tmp_path, monkeypatch):
    """Below PAD_MIN_ELEMS the copy's launch costs more host time than the aligned loads save."""
    mod = K.load("triton", {"PAD_UNALIGNED": "pad", "SPLIT_K": "off"}, tmp_path)
    seen = _spy_launches(mod, monkeypatch)
    a, b = K.make({"M": 70, "N": 77, "K": 101}, CPU_DTYPES[0], K.gen(34))
    check(mod.kernel_fn(a, b), (a, b), CPU_DTYPES[0])
    assert [args[0].stride(0) for _, _, args in seen] == [101]


def test_triton_row_major_b_reads_columns_rounded_up_to_16(tmp_path, monkeypatch):
    """N = 77, B row-major inside a wider NaN-filled buffer: the kernel may read columns 77..79 of
    every row (N_LOAD = 80, so column offsets stay provably contiguous) and the NaNs there must not
    reach the output; a B whose last row ends at its storage's end keeps N_LOAD = N."""
    mod = K.load("triton", {"PAD_UNALIGNED": "as_is", "SPLIT_K": "off", "FP32_B_LAYOUT": "as_is"}, tmp_path)
    seen = _spy_launches(mod, monkeypatch)
    gen = K.gen(34)
    kk, n = 64, 77
    for dtype in CPU_DTYPES:
        a, b = K.make({"M": 40, "N": n, "K": kk}, dtype, gen)
        wide = torch.full((kk, 96), float("nan"), dtype=dtype)
        wide[:, :n] = b
        check(mod.kernel_fn(a, wide[:, :n]), (a, b), dtype)
    assert [args[-1] for _, _, args in seen] == [80] * len(CPU_DTYPES)

    flat = torch.zeros((kk - 1) * 96 + n)
    tight = flat.as_strided((kk, n), (96, 1))
    assert mod._load_cols(tight) == n  # rounding up would read past the storage on the last row
    assert mod._load_cols(torch.zeros(kk, n)) == n  # row stride 77: no room between rows
    assert mod._load_cols(torch.zeros(kk, 96)[:, :n].t().contiguous().t()) == n  # column-major
    assert mod._load_cols(torch.zeros(kk, 96)[:, :n]) == 80


def test_triton_repeated_calls_reuse_one_prepared_plan(tmp_path, monkeypatch):
    """The host work of a call is done once per (shapes, strides, dtype, device): a repeated call
    launches the same kernel with the same grid and arguments but the tensors; other strides (B given
    as a transpose) or another dtype get a plan of their own, and every result is right."""
    mod = K.load("triton", {"SPLIT_K": "off"}, tmp_path)
    seen = _spy_launches(mod, monkeypatch)
    gen = K.gen(35)
    dtype = torch.float16  # (float32 copies a K-major B first: FP32_B_LAYOUT)
    a, b = K.make({"M": 33, "N": 48, "K": 64}, dtype, gen)
    for _ in range(3):
        a.normal_(generator=gen)
        check(mod.kernel_fn(a, b), (a, b), dtype)
    assert len(mod._PLANS) == 1
    ints = [tuple(x for x in args if not isinstance(x, torch.Tensor)) for _, _, args in seen]
    assert len(seen) == 3 and len(set(ints)) == 1 and len({g for _, g, _ in seen}) == 1
    bt = b.contiguous() if b.stride(0) == 1 else b.t().contiguous().t()  # same values, the other layout
    check(mod.kernel_fn(a, bt), (a, bt), dtype)
    assert len(mod._PLANS) == 2 and seen[-1][2][8:10] != seen[0][2][8:10]  # B's strides as the kernel reads them
    other = [d for d in CPU_DTYPES if d != dtype][0]
    a2, b2 = a.to(other), b.to(other)
    check(mod.kernel_fn(a2, b2), (a2, b2), other)
    assert len(mod._PLANS) == 3
