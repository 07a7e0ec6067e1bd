"""Inputs that change in place between calls, and outputs sampled from a run and checked after it.

`Refill` holds one shape's input tensors and gives them the values of a new seed before every
timed call (the same memory, new contents): an output cached by input address or by a fingerprint
of the contents is never the right answer while timed, and `inputs(i)` makes call i's inputs again
for its reference. `Sampled` keeps the outputs of a few calls chosen at random, with a copy taken
right after the call (on the GPU, on the calling stream, before anything waits for other streams);
after the run, when nothing is timed, `verdict()` checks the copies against the reference and that
the outputs themselves were not overwritten by later calls or share memory.
"""

from __future__ import annotations

import os
import random
from typing import Any, Callable

import torch

from autokernel.bench.checks import CheckFailure, compare, make_inputs, reference_outputs
from autokernel.bench.outputs import OutputLedger

SAMPLES = 5  # calls of a timed run whose outputs are checked: a candidate stale on half its timed
# calls (what it takes to move the median) escapes all five with probability 1/32


class Refill:
    """The inputs of one timed shape, given new values in place by seed: refill(i) before
    repetition i; inputs(i) makes repetition i's inputs again (for its reference)."""

    def __init__(self, spec, shape, dtype, device):
        self.spec, self.shape, self.dtype, self.device = spec, shape, dtype, device
        self.base = int.from_bytes(os.urandom(4), "little")
        self.args = self.inputs(-1)

    def inputs(self, i: int) -> tuple:
        return make_inputs(self.spec, self.shape, self.dtype, self.device, (self.base * 1_000_003 + i + 1) % 2**62)

    def __call__(self, i: int) -> None:
        for a, v in zip(self.args, self.inputs(i)):
            if isinstance(a, torch.Tensor):
                a.copy_(v)


class Sampled:
    """Outputs of chosen calls, each under a key that `expected(key)` turns into (the reference's
    output for that call's inputs, atol, rtol); judged after the run by `verdict()`."""

    def __init__(self, expected: Callable[[Any], tuple[Any, float, float]], keep: int = SAMPLES):
        self.expected = expected
        self.taken: list[tuple[Any, list[torch.Tensor]]] = []
        self.ledger = OutputLedger(keep=keep)

    def take(self, key, out, copies: list | None = None) -> None:
        outs = _tensors(out)
        self.taken.append((key, copies if copies is not None else [o.detach().clone() for o in outs]))
        self.ledger.accept(f"timed call {len(self.taken)}", outs)

    def verdict(self) -> str | None:
        try:
            self.ledger.verify_kept()
            for key, copies in self.taken:
                exact, atol, rtol = self.expected(key)
                compare(copies, exact, atol, rtol)
        except CheckFailure as exc:
            return f"an output it returned while timed is wrong: {exc}"
        return None


def spec_expected(spec, refill: Refill) -> Callable[[int], tuple[Any, float, float]]:
    """expected(i) for a kernel type: the spec's float64 reference on call i's inputs."""

    def expected(i: int):
        exact, meta = reference_outputs(spec, refill.inputs(i))
        first = meta[0] if isinstance(meta, (tuple, list)) else meta
        atol, rtol = spec.tolerance(first.dtype if first.is_floating_point() else refill.dtype)
        return exact, atol, rtol

    return expected


def choose(n_calls: int, samples: int = SAMPLES, skip_last: bool = True) -> set[int]:
    """Which of n_calls calls to sample, unpredictably (never the last one with `skip_last`: on
    the GPU what is queued after it would count as tail time)."""
    pool = range(max(1, n_calls - 1) if skip_last else n_calls)
    return set(random.SystemRandom().sample(pool, min(samples, len(pool))))


def _tensors(out) -> list[torch.Tensor]:
    return [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]


class Reservoir:
    """For a run whose length is not known in advance (CPU timing stops on a time budget): `k`
    calls sampled uniformly from all of them (Algorithm R), plus the last call, each with a copy of
    its output taken when it returned. `into(sampled)` hands them over for the verdict."""

    def __init__(self, k: int = 3):
        self.k, self.seen = k, 0
        self.slots: list[tuple] = []
        self.last: tuple | None = None
        self.rng = random.SystemRandom()

    def offer(self, key, out) -> None:
        entry = (key, out, [o.detach().clone() for o in _tensors(out)])
        self.seen += 1
        if len(self.slots) < self.k:
            self.slots.append(entry)
        else:
            j = self.rng.randrange(self.seen)
            if j < self.k:
                self.slots[j] = entry
        self.last = entry

    def into(self, sampled: Sampled) -> Sampled:
        last = [self.last] if self.last is not None and all(self.last is not e for e in self.slots) else []
        for key, out, copies in self.slots + last:
            sampled.take(key, out, copies)
        return sampled
