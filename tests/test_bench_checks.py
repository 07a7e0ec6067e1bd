"""The bench's building blocks in-process: comparisons, poisoning, aliasing, strided inputs, the
environment filter and the anti-cheat verdicts (fast; no worker process)."""

from __future__ import annotations

import pytest
import torch

from autokernel.bench.checks import (CheckFailure, check_inputs_unchanged, check_no_alias, check_structure, compare,
                                     poisoned_empty, reference_outputs, run_check, strided_copy)
from autokernel.bench.isolation import clean_env, is_secret
from autokernel.bench.launches import Launches, cheat_reason
from autokernel.kernels import get_spec

SPEC = get_spec("reduce")


def test_compare_reports_errors_and_enforces_tolerance():
    ref = torch.tensor([1.0, 2.0, -4.0], dtype=torch.float64)
    out = torch.tensor([1.0, 2.0001, -4.0])
    max_abs, max_rel = compare([out], ref, atol=1e-3, rtol=0)
    assert max_abs == pytest.approx(1e-4, rel=1e-2) and max_rel == pytest.approx(5e-5, rel=1e-2)
    with pytest.raises(CheckFailure, match="1 of 3 elements outside"):
        compare([out], ref, atol=1e-5, rtol=1e-5)


def test_compare_nan_and_inf_must_match_the_reference():
    ref = torch.tensor([1.0, float("-inf"), float("nan")], dtype=torch.float64)
    compare([torch.tensor([1.0, float("-inf"), float("nan")])], ref, 1e-4, 1e-4)
    with pytest.raises(CheckFailure, match="NaN/Inf"):
        compare([torch.tensor([float("nan"), float("-inf"), float("nan")])], ref, 1e-4, 1e-4)
    with pytest.raises(CheckFailure, match="non-finite values differ"):
        compare([torch.tensor([1.0, float("inf"), float("nan")])], ref, 1e-4, 1e-4)
    with pytest.raises(CheckFailure, match="finite where the reference"):
        compare([torch.tensor([1.0, 0.0, float("nan")])], ref, 1e-4, 1e-4)


def test_compare_fast_path_reports_what_the_full_walk_does(monkeypatch):
    """A passing comparison takes the one-wait path (checks._all_within); its errors are the full
    walk's, and a finite output against an infinite reference never passes through it."""
    import autokernel.bench.checks as checks

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4096, generator=g, dtype=torch.float64)
    out = (ref + 1e-5 * torch.randn(4096, generator=g, dtype=torch.float64)).float()
    fast = compare([out], ref, 1e-4, 1e-4)
    monkeypatch.setattr(checks, "_all_within", lambda *a: None)
    assert fast == pytest.approx(compare([out], ref, 1e-4, 1e-4), rel=1e-12) and fast[0] > 0
    monkeypatch.undo()
    inf_ref = torch.tensor([1.0, float("inf")], dtype=torch.float64)
    assert checks._all_within(torch.tensor([1.0, 5.0], dtype=torch.float64), inf_ref, 1e-4, 1e-4) is None
    assert checks._all_within(torch.tensor([1.0, float("nan")], dtype=torch.float64),
                              torch.tensor([1.0, 2.0], dtype=torch.float64), 1e-4, 1e-4) is None


def test_compare_in_chunks_counts_and_locates_across_them(monkeypatch):
    """Outputs walk in COMPARE_CHUNK slices (float64 copies of a multi-GB output would not fit):
    counts, the worst element and the first NaN's position span the slices."""
    import autokernel.bench.checks as checks

    monkeypatch.setattr(checks, "COMPARE_CHUNK", 7)
    ref = torch.arange(60, dtype=torch.float64).reshape(6, 10)
    out = ref.float().clone()
    out[1, 2] += 0.01
    out[5, 9] += 0.5  # the worst, in the last slice
    with pytest.raises(CheckFailure, match=r"2 of 60 elements outside .*worst got 59\.5, expected 59\b"):
        compare([out], ref, 1e-4, 1e-4)
    assert compare([ref.float()], ref, 1e-4, 1e-4) == (0.0, 0.0)
    out = ref.float().clone()
    out[4, 3] = float("nan")
    out[5, 0] = float("inf")
    with pytest.raises(CheckFailure, match=r"2 NaN/Inf value\(s\) .*first at \[4, 3\]"):
        compare([out], ref, 1e-4, 1e-4)


def test_structure_dtype_shape_and_type_checks():
    x = torch.randn(4, 8)
    exact, meta = reference_outputs(SPEC, (x,))
    assert exact.dtype == torch.float64 and meta.dtype == torch.float32 and meta.shape == (4,)
    check_structure(torch.zeros(4), meta, "cpu")
    for bad, msg in ((torch.zeros(5), "shape"), (torch.zeros(4, dtype=torch.float16), "dtype"),
                     ([torch.zeros(4)], "expected Tensor"), (3.0, "not a tensor")):
        with pytest.raises(CheckFailure, match=msg):
            check_structure(bad, meta, "cpu")


def test_alias_and_input_mutation_are_detected():
    x = torch.randn(4, 8)
    check_no_alias([torch.zeros(4)], (x,))
    with pytest.raises(CheckFailure, match="aliases input 0"):
        check_no_alias([x[1:2, 0]], (x,))
    before = [x.clone()]
    x[0, 0] += 1
    with pytest.raises(CheckFailure, match="wrote into input 0"):
        check_inputs_unchanged(before, (x,))


def test_poisoned_empty_fills_nan_and_is_undone():
    with poisoned_empty():
        t = torch.empty(16)
        i = torch.empty_like(torch.zeros(3, dtype=torch.int32))
        n = torch.zeros(2).new_empty(5)
    assert torch.isnan(t).all() and torch.isnan(n).all()
    assert (i == torch.iinfo(torch.int32).max).all()
    assert torch.empty is not None and torch.empty(4).shape == (4,)  # restored (no error, plain function)


def test_strided_copy_keeps_values_and_hides_nan_in_the_padding():
    x = torch.randn(3, 5)
    v = strided_copy(x)
    assert torch.equal(v, x) and not v.is_contiguous() and v.storage_offset() == 5 and v.stride() == (8, 1)
    raw = torch.as_strided(v, (3, 8), (8, 1), 5)  # what a kernel ignoring the row stride would read
    assert torch.isnan(raw[:, 5:]).all()
    w = torch.randn(7)
    assert torch.equal(strided_copy(w), w) and strided_copy(w).storage_offset() == 5


def test_run_check_passes_reference_and_fails_a_lazy_kernel():
    args = (torch.randn(6, 40),)
    rep = run_check(SPEC, SPEC.reference, args, "cpu")
    assert rep.max_abs_err < 1e-5

    def unwritten(x):
        out = torch.empty(x.shape[0])
        out[:-1] = x[:-1].sum(-1)
        return out

    with pytest.raises(CheckFailure, match="NaN"):
        run_check(SPEC, unwritten, args, "cpu")


def test_secret_filter():
    env = {"OPENAI_API_KEY": "x", "ANTHROPIC_API_KEY": "x", "HF_TOKEN": "x", "MY_PASSWORD": "x", "GH_TOKEN": "x",
           "DB_SECRET": "x", "OPENAI_BASE_URL": "http://x", "PATH": "/bin", "HF_HOME": "/h", "AUTOKERNEL_HOME": "/a"}
    kept = clean_env(env)
    assert set(kept) - {"PYTHONUNBUFFERED"} == {"PATH", "HF_HOME", "AUTOKERNEL_HOME"}
    assert is_secret("aws_secret_access_key") and not is_secret("TRITON_INTERPRET")


def test_cheat_verdicts():
    lib = ("reduce_kernel",)
    assert cheat_reason(Launches(triton_own=["k"]), lib, on_gpu=False) is None
    assert "never launched" in cheat_reason(Launches(), lib, on_gpu=False)
    assert "elsewhere" in cheat_reason(Launches(triton_other=["other"]), lib, on_gpu=False)
    assert cheat_reason(Launches(gpu_kernels=["my_sum_kernel"]), lib, on_gpu=True) is None
    assert "no GPU kernel" in cheat_reason(Launches(), lib, on_gpu=True)
    only_lib = Launches(gpu_kernels=["void at::native::reduce_kernel<512, 1>(...)",
                                     "triton_red_fused_sum_0"])
    assert "none of its own" in cheat_reason(only_lib, lib, on_gpu=True)
