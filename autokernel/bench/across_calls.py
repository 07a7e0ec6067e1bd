"""What the judge checks across a candidate's calls, not within one.

- `OutputLedger`: outputs it returned earlier are kept and checked again after its later calls. A
  candidate that returns a view of a persistent buffer (or one output object it keeps handing back)
  passes any check made right after the call; the next call overwrites what it returned. So no new
  output may share memory with an accepted one, and none may have changed since it was accepted
  (a copy of its bytes: exact, NaN-safe; of an output over KEEP_BYTES, the bytes at SAMPLE_BYTES
  random positions, the output itself held for the memory check).
- `Refill`: one shape's input tensors, given new contents before every timed call (the same
  memory): an output cached by input address or by a fingerprint of the contents is never the
  right answer while timed; `inputs(i)` makes call i's inputs again for its reference.
- `Sampled`: the outputs of a few timed calls, each with a copy taken right after the call (on the
  GPU, on the calling stream, before anything waits for other streams); after the run, when nothing
  is timed, `verdict()` checks the copies against the reference and that the outputs themselves
  were not overwritten by later calls or share memory. `choose` picks the calls of a run of known
  length, `Reservoir` those of a run that stops on a time budget (uniformly, and the last one).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Callable, Sequence

import torch

from autokernel.bench.checks import CheckFailure, compare, make_inputs, reference_outputs

# The judge's secrets (window offsets, sampled calls, seeds) come from the OS through this one
# function, taken when the judge's modules load, before any candidate: a candidate can rebind
# os.urandom, or random's own _urandom (SystemRandom's source), to make them predictable, but not
# this name (the judge's module globals are in the integrity snapshot).
urandom = os.urandom


def secret_int(nbytes: int = 8) -> int:
    return int.from_bytes(urandom(nbytes), "little")


KEEP = 8  # outputs kept for re-checking (the most recent)
KEEP_BYTES = 64 << 20  # outputs up to this size are copied whole; of a larger one, SAMPLE_BYTES random bytes
SAMPLE_BYTES = 1 << 16  # (a copy of a multi-GB output is not free, and a later call that overwrites a buffer
# changes nearly every byte: 65536 positions the candidate cannot know miss that with no chance worth naming)
LARGE_HELD_BYTES = 16 << 30  # large outputs held alive for the checks, at most (the oldest are let go first)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def unchanged(t: torch.Tensor, saved: torch.Tensor, at: torch.Tensor | None = None) -> bool:
    """Bytewise equal to the copy `saved` (exact, and NaN-safe unlike ==); with `at`, only the bytes
    at those positions, which `saved` holds."""
    return torch.equal(_bytes(t) if at is None else _bytes(t)[at], saved)


def _sample_positions(nbytes: int, device) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(secret_int() % 2**62)
    return torch.randint(nbytes, (SAMPLE_BYTES,), generator=gen, device=device)


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.data_ptr() < sb.data_ptr() + sb.nbytes() and sb.data_ptr() < sa.data_ptr() + sa.nbytes()


class OutputLedger:
    """The accepted outputs of one candidate; `recheck(new_outputs)` after each of its calls."""

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        # label, output, None and a copy of its bytes, or (a large output) byte positions and their bytes
        self._kept: list[tuple[str, torch.Tensor, torch.Tensor | None, torch.Tensor]] = []

    def recheck(self, new: Sequence[torch.Tensor] = ()) -> None:
        """Raise CheckFailure when a new output shares memory with an accepted one, or when an
        accepted output changed since it was accepted (a later call overwrote it)."""
        for label, old, _, _ in self._kept:
            if not old.numel():
                continue
            for i, o in enumerate(new):
                if isinstance(o, torch.Tensor) and o.numel() and _overlap(o, old):
                    raise CheckFailure(f"output {i} reuses the memory of an output it returned before "
                                           f"({label}): earlier results would be overwritten")
        for label, old, at, saved in self._kept:
            if not unchanged(old, saved, at):
                raise CheckFailure(f"the output it returned for {label} changed after a later call (it returns "
                                   "memory that it overwrites)")

    def verify_kept(self) -> None:
        """The kept outputs among themselves: none changed since accepted, no two share memory."""
        for j, (label, out, at, saved) in enumerate(self._kept):
            if not unchanged(out, saved, at):
                raise CheckFailure(f"the output it returned for {label} changed after a later call (it returns "
                                   "memory that it overwrites)")
            for other_label, other, _, _ in self._kept[:j]:
                if out.numel() and other.numel() and _overlap(out, other):
                    raise CheckFailure(f"{label} reuses the memory of {other_label}: earlier results would be "
                                       "overwritten")

    def accept(self, label: str, outs: Sequence[torch.Tensor]) -> None:
        for i, o in enumerate(outs):
            if not isinstance(o, torch.Tensor):
                continue
            name, nbytes = (f"{label}, output {i}" if len(outs) > 1 else label), o.numel() * o.element_size()
            if nbytes <= KEEP_BYTES:
                self._kept.append((name, o, None, _bytes(o).clone()))
            else:
                at = _sample_positions(nbytes, o.device)
                self._kept.append((name, o, at, _bytes(o)[at].clone()))
        del self._kept[:-self.keep]
        held = 0
        for j in range(len(self._kept) - 1, -1, -1):  # newest first: the oldest large ones go over the cap
            entry = self._kept[j]
            if entry[2] is not None:
                held += entry[1].numel() * entry[1].element_size()
                if held > LARGE_HELD_BYTES:
                    del self._kept[j]

    def clear(self) -> None:
        self._kept.clear()


SAMPLES = 5  # calls of a timed run whose outputs are checked: a candidate stale on half its timed
# calls (what it takes to move the median) escapes all five with probability 1/32


WINDOW_MIN_BYTES = 1 << 20  # inputs at least this large are refilled from windows of a pool
WINDOW_MAX_BYTES = 8 << 30  # (the pool is twice the inputs; beyond this, new draws every call)
EPOCH_CALLS = 32  # a window pool's half is drawn again every this many calls


def memory_order(t: torch.Tensor) -> list[int] | None:
    """The dims of `t` from the outermost in memory to the innermost, when `t` is a permutation of a
    dense tensor (contiguous, or a transposed weight): its elements are then one run of memory,
    `t.permute(order).view(-1)`. None for any other layout (gaps, overlaps, broadcast strides)."""
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.size(d)))
    return order if t.permute(order).is_contiguous() else None


def _flat(t: torch.Tensor, order: list[int]) -> torch.Tensor:
    return t.permute(order).view(-1)


class Refill:
    """The inputs of one timed shape, given new contents in place by call index: refill(i) before
    call i; inputs(i) makes call i's inputs again (for its reference).

    New values from the spec's make_inputs before every call cost more than a small kernel's call
    (an fp32 draw, a cast and a copy, ~15 bytes per element, and ~150 us of host time; on the H100
    a refilled timing took twice the plain one). So inputs of WINDOW_MIN_BYTES and more are refilled
    from a pool twice their size, made of two draws of make_inputs: call i copies, per tensor, the
    window that starts at an offset only the judge knows (SHAKE-256 of a secret base and the call's
    epoch; on a 16-byte boundary), one copy per tensor. Every EPOCH_CALLS calls one half of the pool
    is drawn again from a new seed. The values change every epoch and the windows within one, so no
    output computed before is the right one, and recognizing a window still means reading the
    input, which is what a memory-bound kernel costs. Smaller inputs, and layouts that are not
    one run of memory, get a new make_inputs draw every call; a tensor that every draw makes the
    same keeps its values."""

    def __init__(self, spec, shape, dtype, device):
        self.spec, self.shape, self.dtype, self.device = spec, shape, dtype, device
        self.base = secret_int()
        first = self.args = self._draw(-1)
        filled = [isinstance(a, torch.Tensor) and a.numel() > 0 for a in first]
        self.orders = [memory_order(a) if f else None for a, f in zip(first, filled)]
        tensors = [a for a, f in zip(first, filled) if f]
        nbytes = sum(a.numel() * a.element_size() for a in tensors)
        self.windowed = (WINDOW_MIN_BYTES <= nbytes <= WINDOW_MAX_BYTES and not _overlapping(tensors)
                         and all(o is not None for o, f in zip(self.orders, filled) if f))
        if not self.windowed:
            return
        other = self._draw(-2)
        # A tensor every seed draws the same (rotary's cos/sin tables) is part of the op's setting,
        # not a random input: it keeps its values, as the model's would.
        live = [f and not torch.equal(a, b) for a, b, f in zip(first, other, filled)]
        if not any(live):
            self.windowed = False
            return
        self.pools = [torch.empty(2 * a.numel(), dtype=a.dtype, device=a.device) if ok else None
                      for a, ok in zip(first, live)]
        self.flats = [_flat(a, o) if ok else None for a, o, ok in zip(first, self.orders, live)]
        self.sizes = [a.numel() if ok else 0 for a, ok in zip(first, live)]
        # windows start on 16-byte boundaries: a copy from an unaligned start is not vectorized
        self.steps = [max(1, 16 // a.element_size()) if ok else 1 for a, ok in zip(first, live)]
        self._offsets: tuple[int | None, list[int]] = (None, [])
        self.held = [None, None]  # the epoch whose draw each half of the pools holds
        for half, epoch in self._epochs(-1).items():
            self._fill(half, epoch, first if epoch == -1 else other)
        self(-1)

    def _seed(self, k: int) -> int:
        return (self.base * 1_000_003 + k + 1) % 2**62

    def _draw(self, k: int) -> tuple:
        return make_inputs(self.spec, self.shape, self.dtype, self.device, self._seed(k))

    def _offset(self, i: int, j: int) -> int:
        """Where call i's window of tensor j starts: SHAKE-256 of the secret base and i's epoch gives
        the whole epoch's offsets at once (a per-call hash cost more host time than the copy)."""
        e, k = divmod(i, EPOCH_CALLS)
        if self._offsets[0] != e:
            raw = hashlib.shake_256(f"{self.base}:{e}".encode()).digest(8 * EPOCH_CALLS * len(self.pools))
            self._offsets = (e, [int.from_bytes(raw[8 * q:8 * q + 8], "little") for q in range(len(raw) // 8)])
        step = self.steps[j]
        return self._offsets[1][k * len(self.pools) + j] % (self.sizes[j] // step + 1) * step

    def _epochs(self, i: int) -> dict[int, int]:
        """{half: epoch}: the draws the pool holds at call i (its epoch's in one half, the previous
        epoch's in the other)."""
        e = i // EPOCH_CALLS
        return {e % 2: e, (e - 1) % 2: e - 1}

    def _fill(self, half: int, epoch: int, draw: tuple | None = None) -> None:
        # every draw comes from the same make_inputs as the first, in its layout: its memory orders serve
        for pool, o, v in zip(self.pools, self.orders, draw if draw is not None else self._draw(epoch)):
            if pool is not None:
                n = pool.numel() // 2
                pool[half * n:(half + 1) * n].copy_(_flat(v, o))
        self.held[half] = epoch

    def inputs(self, i: int) -> tuple:
        if not self.windowed:
            return self._draw(i)
        draws = {half: self._draw(epoch) for half, epoch in self._epochs(i).items()}
        out = []
        for j, (a, o, pool) in enumerate(zip(self.args, self.orders, self.pools)):
            if pool is None:
                out.append(draws[0][j])
                continue
            n = self.sizes[j]
            whole = torch.cat([_flat(draws[h][j], o) for h in (0, 1)])
            t = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
            at = self._offset(i, j)
            _flat(t, o).copy_(whole[at:at + n])
            out.append(t)
        return tuple(out)

    def __call__(self, i: int) -> None:
        if not self.windowed:
            for a, v in zip(self.args, self._draw(i)):
                if isinstance(a, torch.Tensor):
                    a.copy_(v)
            return
        for half, epoch in self._epochs(i).items():
            if self.held[half] != epoch:
                self._fill(half, epoch)
        for j, (flat, pool) in enumerate(zip(self.flats, self.pools)):
            if pool is not None:
                at = self._offset(i, j)
                flat.copy_(pool[at:at + self.sizes[j]])


def _overlapping(tensors: list[torch.Tensor]) -> bool:
    return any(_overlap(a, b) for k, a in enumerate(tensors) for b in tensors[:k])


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
    pool = max(1, n_calls - 1) if skip_last else n_calls
    picked: set[int] = set()
    while len(picked) < min(samples, pool):
        picked.add(secret_int() % pool)
    return picked


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

    def offer(self, key, out) -> None:
        entry = (key, out, [o.detach().clone() for o in _tensors(out)])
        self.seen += 1
        if len(self.slots) < self.k:
            self.slots.append(entry)
        else:
            j = secret_int() % self.seen
            if j < self.k:
                self.slots[j] = entry
        self.last = entry

    def into(self, sampled: Sampled) -> Sampled:
        last = [self.last] if self.last is not None and all(self.last is not e for e in self.slots) else []
        for key, out, copies in self.slots + last:
            sampled.take(key, out, copies)
        return sampled
