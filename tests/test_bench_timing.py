"""The bench's GPU timer: it times the GPU's work, not the host's launch path; the repetitions its
median needs, from a pilot's spread (the count on the CPU, the timer on the GPU)."""

from __future__ import annotations

import time

import pytest
import torch

from autokernel.bench.timing import MEDIAN_PRECISION, cycles_per_us, reps_for, time_call


def test_a_steady_pilot_needs_only_the_floor_and_a_noisy_one_the_whole_budget():
    assert reps_for([10.0] * 32, 100, 2000) == 100
    assert reps_for([10.0 + 5 * (i % 2) for i in range(32)], 100, 2000) == 2000  # IQR half the median
    assert reps_for(None, 100, 2000) == 2000 and reps_for([1.0, 2.0], 100, 2000) == 2000


def test_the_repetitions_grow_with_the_square_of_the_spread():
    def pilot(rel_sigma):  # 32 times whose IQR is 1.349 sigma around 100
        iqr = 1.349 * rel_sigma * 100
        return sorted(100 + iqr * (i / 31 - 0.5) * 2 for i in range(32))

    one, two = reps_for(pilot(0.01), 10, 100_000), reps_for(pilot(0.02), 10, 100_000)
    assert 3.6 <= two / one <= 4.4, (one, two)
    # two standard errors of the median (1.2533 sigma / sqrt(n)) within the precision
    assert 2 * 1.2533 * 0.02 / two ** 0.5 <= MEDIAN_PRECISION * 1.2, two


@pytest.mark.gpu
def test_a_known_gpu_sleep_is_timed_at_its_length():
    cycles = int(50 * cycles_per_us("cuda"))
    got = time_call(lambda: torch.cuda._sleep(cycles), (), "cuda", min_reps=20, min_time_s=0.05)
    # The clock may run below its nominal rate, which only lengthens the sleep.
    assert 45 <= got["median_us"] <= 120, got


@pytest.mark.gpu
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


@pytest.mark.gpu
def test_a_steady_kernel_gets_the_floor_and_timed_calls_see_inputs_no_call_saw_before():
    cycles = int(30 * cycles_per_us("cuda"))
    seen: list[int] = []
    sampled: list[int] = []
    x = torch.zeros(1, device="cuda")

    def sleep_then_output():
        torch.cuda._sleep(cycles)
        return x + 1

    got = time_call(sleep_then_output, (), "cuda", min_reps=100, refill=seen.append,
                    on_sample=lambda i, out, copies: sampled.append(i))
    assert got["reps"] < 2000, got  # a GPU sleep's spread is tiny: nowhere near the time budget's count
    timed = seen[-got["reps"]:]
    assert timed == list(range(timed[0], timed[0] + got["reps"]))
    assert not set(timed) & set(seen[:-got["reps"]])  # the probe's and the pilot's indices are their own
    assert sampled and set(sampled) <= set(timed)
