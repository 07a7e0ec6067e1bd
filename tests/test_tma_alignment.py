"""The TMA starters' alignment checks while torch.compile traces them: a fake tensor has no memory, so
its storage offset decides (no data_ptr call, which warns today and is to become an error), and a real
tensor still answers by its address."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from support.kernel_cases import Kernel

CHECKS = {  # kernel type -> how its starter asks "can TMA describe this 2-D operand?"
    "matmul": lambda mod, t: mod._tma_ok(t, 1),
    "fused_mlp": lambda mod, t: mod._tma_rows(t),
    "flash_attention": lambda mod, t: mod.tma_ok(t.view(1, 1, *t.shape)),
}


@pytest.mark.parametrize("kernel_type", sorted(CHECKS))
def test_alignment_is_read_from_the_storage_offset_of_a_fake_tensor(kernel_type):
    mod = Kernel(kernel_type).load("triton")
    ok = CHECKS[kernel_type]
    base = torch.empty(64 * 64 + 8, dtype=torch.float16)
    real_aligned, real_shifted = base[:4096].view(64, 64), base[1:4097].view(64, 64)
    assert ok(mod, real_aligned) and not ok(mod, real_shifted)  # 2-byte offset: the address says no
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # data_ptr on a fake tensor warns: it must not be asked
        with FakeTensorMode() as mode:
            fake = mode.from_tensor(base)
            assert ok(mod, fake[:4096].view(64, 64))
            assert not ok(mod, fake[1:4097].view(64, 64))  # 2 bytes in
            assert ok(mod, fake[8:4104].view(64, 64))  # 16 bytes in
