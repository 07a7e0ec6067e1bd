"""The bench's GPU timer: it times the GPU's work, not the host's launch path (GPU only)."""

from __future__ import annotations

import time

import pytest
import torch

from autokernel.bench.timing import cycles_per_us, time_call

pytestmark = pytest.mark.gpu


def test_a_known_gpu_sleep_is_timed_at_its_length():
    cycles = int(50 * cycles_per_us("cuda"))
    got = time_call(lambda: torch.cuda._sleep(cycles), (), "cuda", min_reps=20, min_time_s=0.05)
    # The clock may run below its nominal rate, which only lengthens the sleep.
    assert 45 <= got["median_us"] <= 120, got


def test_host_time_before_the_launch_is_not_counted():
    x = torch.zeros(1 << 16, device="cuda")
    cycles = int(20 * cycles_per_us("cuda"))

    def slow_host_launch():
        t_end = time.perf_counter() + 300e-6  # a slow Python wrapper: 300 us before its launch
        while time.perf_counter() < t_end:
            pass
        torch.cuda._sleep(cycles)
        x.add_(1)

    got = time_call(slow_host_launch, (), "cuda", min_reps=20, min_time_s=0.05)
    assert 15 <= got["median_us"] <= 150, got  # ~20 us of GPU work; 320+ if the host's wait counted
