"""Outputs a candidate returned earlier, kept and re-checked after its later calls.

A candidate that returns a view of a persistent buffer (or one output object it keeps handing
back) passes any check made right after the call; the next call overwrites what it returned. So
every judge keeps the outputs it has already accepted, and after each later call checks that none
of them shares memory with the new output and that none has changed since it was accepted
(a copy of its bytes: exact, NaN-safe).
"""

from __future__ import annotations

from typing import Sequence

import torch

from autokernel.bench.checks import CheckFailure

KEEP = 8  # outputs kept for re-checking (the most recent)
KEEP_BYTES = 64 << 20  # larger outputs are not kept (a copy of a multi-GB output is not free); small ones catch it


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def unchanged(t: torch.Tensor, saved: torch.Tensor) -> bool:
    """Bytewise equal to the copy `saved` (exact, and NaN-safe unlike ==)."""
    return torch.equal(_bytes(t), saved)


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.data_ptr() < sb.data_ptr() + sb.nbytes() and sb.data_ptr() < sa.data_ptr() + sa.nbytes()


class OutputLedger:
    """The accepted outputs of one candidate; `recheck(new_outputs)` after each of its calls."""

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self._kept: list[tuple[str, torch.Tensor, torch.Tensor]] = []  # label, output, a copy of its bytes

    def recheck(self, new: Sequence[torch.Tensor] = ()) -> None:
        """Raise CheckFailure when a new output shares memory with an accepted one, or when an
        accepted output changed since it was accepted (a later call overwrote it)."""
        for label, old, _ in self._kept:
            if not old.numel():
                continue
            for i, o in enumerate(new):
                if isinstance(o, torch.Tensor) and o.numel() and _overlap(o, old):
                    raise CheckFailure(f"output {i} reuses the memory of an output it returned before "
                                           f"({label}): earlier results would be overwritten")
        for label, old, saved in self._kept:
            if not unchanged(old, saved):
                raise CheckFailure(f"the output it returned for {label} changed after a later call (it returns "
                                   "memory that it overwrites)")

    def verify_kept(self) -> None:
        """The kept outputs among themselves: none changed since accepted, no two share memory."""
        for j, (label, out, saved) in enumerate(self._kept):
            if not unchanged(out, saved):
                raise CheckFailure(f"the output it returned for {label} changed after a later call (it returns "
                                   "memory that it overwrites)")
            for other_label, other, _ in self._kept[:j]:
                if out.numel() and other.numel() and _overlap(out, other):
                    raise CheckFailure(f"{label} reuses the memory of {other_label}: earlier results would be "
                                       "overwritten")

    def accept(self, label: str, outs: Sequence[torch.Tensor]) -> None:
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor) and o.numel() * o.element_size() <= KEEP_BYTES:
                self._kept.append((f"{label}, output {i}" if len(outs) > 1 else label, o, _bytes(o).clone()))
        del self._kept[:-self.keep]

    def clear(self) -> None:
        self._kept.clear()
