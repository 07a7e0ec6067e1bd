"""The fp32 dot precision of the Triton matmul starter (FP32_PRECISION: "ieee" or "tf32x3").

tf32x3 is emulated in torch the way Triton lowers it (hi = cvt.rna.tf32(x), lo = x - hi read by
the tensor core as tf32; lo*hi + hi*lo + hi*hi with exact products and fp32 sums): its error is
that of fp32 accumulation itself, so it meets the fp32 tolerance where plain tf32 misses it by
orders of magnitude. The starter takes it under the interpreter (which computes every dot in true
fp32), and KernelBench GEMM solutions built from the starter expose it to the search.
"""

from __future__ import annotations

import pytest
import torch

from autokernel.kernelfile import import_kernel, parse_source, read_kernel_file, with_config
from autokernel.kernels import starter_path
from autokernel.proposers.search import valid_config_fn

ATOL = RTOL = 1e-4  # KernelBench's fp32 tolerance (autokernel/kb/inputs.py)


def tf32_rna(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> tf32 (10-bit mantissa), round to nearest with ties away: PTX cvt.rna.tf32.f32."""
    return ((x.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def tf32_trunc(x: torch.Tensor) -> torch.Tensor:
    """What a tensor core reads of an fp32 register given to a tf32 MMA: the top 19 bits."""
    return (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def tf32x3(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    ah, bh = tf32_rna(a), tf32_rna(b)
    al, bl = tf32_trunc(a - ah), tf32_trunc(b - bh)
    return (al @ bh + ah @ bl) + ah @ bh


def allclose_ratio(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| / (atol + rtol |ref|): torch.allclose passes iff this is <= 1."""
    return float(((x.double() - ref.double()).abs() / (ATOL + RTOL * ref.double().abs())).max())


def test_tf32_rounding_helpers():
    x = torch.tensor([1.0, 1.0 + 2.0 ** -11, 1.0 + 2.0 ** -10 + 2.0 ** -11, -(1.0 + 2.0 ** -11), 3.0 + 2.0 ** -20])
    assert tf32_rna(x).tolist() == [1.0, 1.0 + 2.0 ** -10, 1.0 + 2.0 ** -9, -(1.0 + 2.0 ** -10), 3.0]
    assert tf32_trunc(x).tolist() == [1.0, 1.0, 1.0 + 2.0 ** -10, -1.0, 3.0]
    # hi + lo recovers x to within 2^-22 relative (lo keeps 11 of its bits)
    y = torch.randn(10000, generator=torch.Generator().manual_seed(0))
    hi = tf32_rna(y)
    rel = ((hi + tf32_trunc(y - hi)).double() - y.double()).abs() / y.double().abs()
    assert float(rel.max()) <= 2.0 ** -21


@pytest.mark.parametrize("m,k,n", [(512, 2048, 512), (64, 16384, 64)])
def test_tf32x3_is_as_accurate_as_fp32_and_plain_tf32_is_not(m, k, n):
    gen = torch.Generator().manual_seed(k)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    ref64 = a.double() @ b.double()
    ref32 = a @ b  # what KernelBench compares to
    err_fp32 = float((ref32.double() - ref64).abs().max())
    x3 = tf32x3(a, b)
    assert float((x3.double() - ref64).abs().max()) < 2 * err_fp32
    assert torch.allclose(x3, ref32, atol=ATOL, rtol=RTOL)
    assert allclose_ratio(x3, ref32) < 1.0  # close to the edge (0.86 with torch 2.13's CPU BLAS order)
    plain = tf32_rna(a) @ tf32_rna(b)
    assert allclose_ratio(plain, ref32) > 20  # one tf32 pass misses the fp32 tolerance outright


# -- the starter ------------------------------------------------------------------------------------

def _source() -> str:
    return starter_path("matmul", "triton").read_text()


def test_precision_is_a_declared_tunable_and_16bit_ignores_it():
    kf = parse_source(_source())
    assert kf.search_space["FP32_PRECISION"] == ["ieee", "tf32x3"]
    assert kf.config["FP32_PRECISION"] in kf.search_space["FP32_PRECISION"]
    mod = import_kernel(read_kernel_file(starter_path("matmul", "triton")))
    assert mod.call_config(torch.float32)["PRECISION"] == kf.config["FP32_PRECISION"]
    for dtype in (torch.float16, torch.bfloat16):
        assert mod.call_config(dtype)["PRECISION"] is None  # Triton's default for 16-bit operands


def test_valid_config_counts_the_tf32x3_copies_and_keeps_the_fp32_space_reachable():
    src = _source()
    kf = parse_source(src)
    valid = valid_config_fn(src)
    base = dict(kf.config)
    # 128x256x64 fp32 tiles, 2 stages: 192 KiB of pipeline; tf32x3's hi/lo copies push it past 227 KiB
    big = {**base, "FP32_BLOCK_M": 128, "FP32_BLOCK_N": 256, "FP32_BLOCK_K": 64, "FP32_NUM_STAGES": 2,
           "FP32_NUM_WARPS": 8}
    assert valid({**big, "FP32_PRECISION": "ieee"}) and not valid({**big, "FP32_PRECISION": "tf32x3"})
    # every fp32 value of the space is part of at least one valid tf32x3 configuration
    for name in ("FP32_BLOCK_M", "FP32_BLOCK_N", "FP32_BLOCK_K", "FP32_NUM_STAGES", "FP32_NUM_WARPS"):
        for v in kf.search_space[name]:
            assert any(valid({**base, "FP32_PRECISION": "tf32x3", "FP32_BLOCK_M": 64, "FP32_BLOCK_N": 64,
                              "FP32_BLOCK_K": 32, "FP32_NUM_STAGES": 2, "FP32_NUM_WARPS": w, name: v})
                       for w in (4, 8)), (name, v)
    # an accumulator too large for the registers is refused
    assert not valid({**base, "FP32_BLOCK_M": 256, "FP32_BLOCK_N": 256, "FP32_BLOCK_K": 16,
                      "FP32_NUM_STAGES": 2, "FP32_NUM_WARPS": 8})


@pytest.mark.parametrize("precision", ["ieee", "tf32x3"])
def test_interpreter_runs_both_precisions(tmp_path, precision):
    """The interpreter accepts input_precision="tf32x3" (it computes the dot in fp32 anyway)."""
    path = tmp_path / f"mm_{precision}.py"
    path.write_text(with_config(_source(), {"FP32_PRECISION": precision, "FP32_BLOCK_M": 32,
                                            "FP32_BLOCK_N": 32, "FP32_BLOCK_K": 16}))
    mod = import_kernel(read_kernel_file(path))
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(70, 100, generator=gen), torch.randn(130, 100, generator=gen).t()  # K tail, W.t()
    out = mod.kernel_fn(a, b)
    torch.testing.assert_close(out.double(), a.double() @ b.double(), atol=ATOL, rtol=RTOL)
    h = mod.kernel_fn(a.half(), b.half())
    assert h.dtype == torch.float16
    torch.testing.assert_close(h.double(), a.half().double() @ b.half().double(), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("layout", ["copy", "as_is"])
def test_fp32_k_contiguous_b_layouts(tmp_path, layout, monkeypatch):
    """FP32_B_LAYOUT: "copy" hands the kernel a row-major copy of a K-contiguous B (nn.Linear's
    weight.t()), "as_is" the view itself; both compute the same product, 16-bit inputs untouched."""
    path = tmp_path / f"mm_{layout}.py"
    path.write_text(with_config(_source(), {"FP32_B_LAYOUT": layout, "FP32_BLOCK_M": 32, "FP32_BLOCK_N": 32,
                                            "FP32_BLOCK_K": 16, "PAD_UNALIGNED": "as_is"}))
    mod = import_kernel(read_kernel_file(path))
    seen = []
    launch = mod._matmul_tile_kernel

    class Spy:  # records the B strides each launch gets, then launches for real
        def __getitem__(self, grid):
            def run(a, b, *rest, **kw):
                seen.append((b.dtype, tuple(b.stride())))
                return launch[grid](a, b, *rest, **kw)
            return run

    monkeypatch.setattr(mod, "_matmul_tile_kernel", Spy())
    gen = torch.Generator().manual_seed(7)
    a, w = torch.randn(40, 96, generator=gen), torch.randn(72, 96, generator=gen)
    out = mod.kernel_fn(a, w.t())
    torch.testing.assert_close(out.double(), a.double() @ w.double().t(), atol=ATOL, rtol=RTOL)
    mod.kernel_fn(a.half(), w.half().t())
    row_major, k_major = (72, 1), (1, 96)
    assert seen == [(torch.float32, row_major if layout == "copy" else k_major), (torch.float16, k_major)]


# -- KernelBench GEMM solutions ---------------------------------------------------------------------

def test_kb_gemm_solutions_expose_the_precision(home):
    from autokernel.kb.problems import load_problems
    from autokernel.kb.solutions import initial_solution

    checked = 0
    for p in load_problems("sample", size="tiny"):
        sol = initial_solution(p)
        if sol.library != "matmul":
            continue
        kf = parse_source(sol.source)
        assert kf.search_space.get("FP32_PRECISION") == ["ieee", "tf32x3"], p.label()
        valid = valid_config_fn(sol.source)
        for precision in ("ieee", "tf32x3"):
            assert valid({**kf.config, "FP32_PRECISION": precision}), (p.label(), precision)
        # the search's candidates can switch it
        src = with_config(sol.source, {"FP32_PRECISION": "tf32x3"})
        assert parse_source(src).config["FP32_PRECISION"] == "tf32x3"
        checked += 1
    assert checked >= 3
