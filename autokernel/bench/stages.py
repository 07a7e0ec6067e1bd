"""The five correctness stages of DESIGN.md 4. Each draws fresh inputs (a new seed per check, so a
candidate that caches results fails; smoke's second call reuses the first call's tensors with new
contents, so one that caches by address fails too) and compares against the spec's reference in
float64, computed after the call. Every output accepted stays in a ledger and is checked again
after later calls (a view of a persistent buffer that the next call overwrites fails); after every
call the judge's integrity snapshot is compared (`verify`).

A stage returns a StageVerdict; a wrong result is a "fail" verdict. Any other exception (the
candidate crashed, ran out of memory, hit the stage's time limit) propagates to the judge, which
turns it into an outcome.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import torch

from autokernel.bench.checks import CheckFailure, make_inputs, require_plain, run_check, strided_copy
from autokernel.bench.launches import Launches, record_triton
from autokernel.bench.across_calls import OutputLedger, secret_int
from autokernel.bench.share import TorchWork
from autokernel.bench.result import StageVerdict
from autokernel.kernels.spec import KernelSpec, Shape, to_dtype

@dataclass
class StageContext:
    spec: KernelSpec
    fn: Callable
    device: str
    dtype: str  # the requested (timed) dtype name
    shapes: list[Shape]  # the timed shapes (the model's real ones)
    quick: bool
    deterministic: bool
    interpreted: bool
    module_name: str
    nondeterminism_reason: str = ""
    launches: Launches = field(default_factory=Launches)
    profile_next: bool = False  # record GPU kernel names and times on the next call (anti-cheat evidence)
    verify: Callable[[], None] = lambda: None  # the judge's integrity check, after every call
    ledger: OutputLedger = field(default_factory=OutputLedger)
    _seeds: itertools.count = field(default_factory=lambda: itertools.count(secret_int(3)))

    def seed(self) -> int:
        return next(self._seeds) * 7919 + 17

    def call(self, fn, args):
        """One call of the candidate with its launches recorded (the caller runs self.verify after);
        its outputs must be plain tensors (checks.require_plain) before the judge touches them."""
        out = self._call(fn, args)
        require_plain(out)
        return out

    def _call(self, fn, args):
        with record_triton(self.module_name, self.launches):
            if self.profile_next and self.device.startswith("cuda"):
                from autokernel.bench.launches import record_gpu

                self.profile_next = False
                with record_gpu(self.launches) as ended:  # cold (its first call compiles): no lead sleep
                    out = fn(*args)
                    ended()
                return out
            if self.device.startswith("cuda"):
                return fn(*args)
            with TorchWork(self.launches.meter):  # interpreter: the library work it calls
                return fn(*args)

    def check(self, shape: Shape, dtype: str, scale: str = "normal", transform=None, reuse: tuple | None = None):
        """One check on fresh inputs (`reuse`: in the tensors of an earlier check, refilled)."""
        seed, dt = self.seed(), to_dtype(dtype)

        def make():
            args = make_inputs(self.spec, shape, dt, self.device, seed, scale)
            return transform(args) if transform is not None else args

        label = f"{self.spec.shape_label(shape)} {dtype}{'' if scale == 'normal' else ' ' + scale}"
        try:
            report = run_check(self.spec, self.fn, make, self.device, call_wrapper=self.call, scale=scale,
                               ledger=self.ledger, label=label, args=reuse, after_call=self.verify)
            return report, report.args
        except CheckFailure as exc:
            raise CheckFailure(f"{label}: {exc}") from None

    def dtypes(self) -> tuple[list[str], str]:
        if self.quick:
            return [self.dtype], ""
        names = [self.dtype] + [d for d in self.spec.dtypes if d != self.dtype]
        if self.interpreted and self.spec.uses_dot and "bfloat16" in names and self.dtype != "bfloat16":
            names.remove("bfloat16")
            return names, "bfloat16 skipped under the Triton interpreter (its tl.dot is wrong for bf16)"
        return names, ""


class _Errors:
    def __init__(self):
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.n = 0

    def add(self, report) -> None:
        self.max_abs = max(self.max_abs, report.max_abs_err)
        self.max_rel = max(self.max_rel, report.max_rel_err)
        self.n += 1

    def verdict(self, name: str, detail: str) -> StageVerdict:
        return StageVerdict(name, "pass", f"{self.n} checks; {detail}".strip("; "), self.max_abs, self.max_rel)


def _unique(shapes: list[Shape]) -> list[Shape]:
    seen, out = set(), []
    for s in shapes:
        key = tuple(sorted(s.items()))
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def smoke(ctx: StageContext) -> StageVerdict:
    """One small shape, twice: the second call in the first call's tensors refilled with new values
    (a result cached by input address or returned in the same memory fails already here)."""
    errs = _Errors()
    shape = ctx.spec.small_shapes[0]
    ctx.profile_next = True
    report, args = ctx.check(shape, ctx.dtype)
    errs.add(report)
    report, _args = ctx.check(shape, ctx.dtype, reuse=args)
    errs.add(report)
    return errs.verdict("smoke", ctx.spec.shape_label(shape))


def shapes(ctx: StageContext) -> StageVerdict:
    """The timed shapes plus a ladder of sizes in the requested dtype; the other dtypes the spec
    supports on the small shapes and the first timed shape."""
    errs = _Errors()
    ladder = list(ctx.spec.small_shapes)
    if ctx.device.startswith("cuda") and not ctx.quick:
        ladder += list(ctx.spec.default_shapes)
    dtypes, note = ctx.dtypes()
    for dt in dtypes:
        todo = _unique(ctx.shapes + ladder) if dt == ctx.dtype else _unique(ctx.spec.small_shapes + ctx.shapes[:1])
        for shape in todo:
            report, _ = ctx.check(shape, dt)
            errs.add(report)
    return errs.verdict("shapes", f"dtypes {', '.join(dtypes)}" + (f"; {note}" if note else ""))


def stability(ctx: StageContext) -> StageVerdict:
    errs = _Errors()
    for scale in ctx.spec.adversarial:
        for shape in _unique(ctx.spec.small_shapes[:1] + ctx.shapes[:1]):
            report, _ = ctx.check(shape, ctx.dtype, scale)
            errs.add(report)
    return errs.verdict("stability", f"scales {', '.join(ctx.spec.adversarial)}")


def determinism(ctx: StageContext) -> StageVerdict:
    if not ctx.deterministic:  # kernelfile.py refuses False without a NONDETERMINISM_REASON
        return StageVerdict("determinism", "skip", f"DETERMINISTIC = False: {ctx.nondeterminism_reason}")
    errs = _Errors()
    shape = ctx.shapes[0]
    report, args = ctx.check(shape, ctx.dtype)
    errs.add(report)
    first = report.outputs
    try:
        again = ctx.call(ctx.fn, args)
    finally:
        ctx.verify()
    flat_again = list(again) if isinstance(again, (tuple, list)) else [again]
    ctx.ledger.recheck([t for t in flat_again if isinstance(t, torch.Tensor)])
    for i, (a, b) in enumerate(zip(first if isinstance(first, (tuple, list)) else [first], flat_again)):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or not torch.equal(a, b):
            diff = (a.double() - b.double()).abs().max().item() if isinstance(b, torch.Tensor) and a.shape == b.shape else None
            raise CheckFailure(f"{ctx.spec.shape_label(shape)}: two runs on the same inputs differ"
                               + (f" (max diff {diff:.3g})" if diff is not None else ""))
    return errs.verdict("determinism", f"bitwise equal on {ctx.spec.shape_label(shape)}")


def edge(ctx: StageContext) -> StageVerdict:
    """Edge shapes (size 1, not powers of two), then non-contiguous, storage-offset inputs."""
    errs = _Errors()
    for shape in ctx.spec.edge_shapes:
        report, _ = ctx.check(shape, ctx.dtype)
        errs.add(report)
    idx = ctx.spec.noncontiguous_args

    def strided(args):
        return tuple(strided_copy(a) if i in idx and isinstance(a, torch.Tensor) else a for i, a in enumerate(args))

    for shape in _unique(ctx.spec.small_shapes[:1] + ctx.spec.edge_shapes[-1:]):
        try:
            report, _ = ctx.check(shape, ctx.dtype, transform=strided)
        except CheckFailure as exc:
            raise CheckFailure(f"non-contiguous offset inputs: {exc}") from None
        errs.add(report)
    return errs.verdict("edge", f"{len(ctx.spec.edge_shapes)} edge shapes + non-contiguous args {list(idx)}")


STAGE_FUNCS = (("smoke", smoke), ("shapes", shapes), ("stability", stability), ("determinism", determinism),
               ("edge", edge))
