"""Per-scale tolerances: where an adversarial scale makes every implementation in a dtype err more,
the spec says so, and the bench's checks use it for that scale only."""

from __future__ import annotations

import pytest
import torch

from autokernel.bench.checks import CheckFailure, run_check
from autokernel.kernels.flash_attention import SPEC, make_inputs, reference

LARGE = {"batch": 1, "heads": 4, "kv_heads": 2, "seq": 1000, "head_dim": 128, "causal": 1}


def _fp32_sdpa(q, k, v, causal, scale):
    return reference(q, k, v, causal, scale).clone()  # PyTorch's own fp32 SDPA: a real implementation


def test_flash_attention_large_scale_tolerance_is_what_fp32_itself_needs():
    assert SPEC.tolerance("float32") == (1e-4, 1e-4)
    assert SPEC.tolerance("float32", "large") == (5e-4, 5e-4)
    assert SPEC.tolerance("bfloat16", "large") == SPEC.tolerance("bfloat16")  # only fp32 is loosened
    q, k, v, causal, scale = make_inputs(LARGE, torch.float32, "cpu", torch.Generator().manual_seed(1), "large")
    out = _fp32_sdpa(q, k, v, causal, scale).double()
    exact = reference(q.double(), k.double(), v.double(), causal, scale)
    err = (out - exact).abs()

    def outside(atol, rtol):
        return int((err > atol + rtol * exact.abs()).sum())

    assert outside(*SPEC.tolerance("float32")) > 0  # PyTorch's fp32 SDPA fails 1e-4 at logits ~110
    assert outside(*SPEC.tolerance("float32", "large")) == 0


def test_run_check_applies_the_scale_tolerance_only_for_its_scale():
    args = make_inputs(LARGE, torch.float32, "cpu", torch.Generator().manual_seed(1), "large")
    report = run_check(SPEC, _fp32_sdpa, args, "cpu", scale="large")
    assert 1e-4 < report.max_abs_err < 5e-4
    with pytest.raises(CheckFailure, match="outside atol=0.0001"):
        run_check(SPEC, _fp32_sdpa, args, "cpu")
