"""One correctness check: fresh inputs, a poisoned call of the candidate, and every comparison
DESIGN.md 4 asks for (type, shape, dtype, device, NaN/Inf, aliasing, inputs untouched, tolerance).

The reference is computed after the call, from the inputs made again from their seed: while the
candidate runs, no expected answer exists anywhere it could look (its caller's frames, the heap).
A failed check raises CheckFailure with a one-line reason; the stage that ran it records it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from autokernel.bench.share import paused
from autokernel.kernels.spec import KernelSpec, Shape


class CheckFailure(Exception):
    """The candidate ran and its result is wrong."""


@dataclass
class CheckReport:
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    outputs: Any = None
    args: tuple = ()  # the inputs the candidate was called with


def make_inputs(spec: KernelSpec, shape: Shape, dtype: torch.dtype, device: str, seed: int,
                scale: str = "normal") -> tuple:
    gen = torch.Generator(device=device).manual_seed(seed)
    return tuple(spec.make_inputs(shape, dtype, device, gen, scale))


def upcast(args: Sequence) -> tuple:
    return tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)


def meta_outputs(spec: KernelSpec, args: Sequence) -> Any:
    """The reference's output structure (shapes, dtypes) from meta tensors: no values."""
    try:
        return spec.reference(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args])
    except Exception:
        return None


def reference_outputs(spec: KernelSpec, args: Sequence) -> tuple[Any, Any]:
    """(reference in float64 where allowed, the reference's output in the real dtype's form).

    The second one fixes what the candidate must return (type, shape, dtype); it is taken from
    a meta-tensor run when the reference supports it, so it costs nothing at large shapes."""
    exact = spec.reference(*upcast(args)) if spec.reference_upcast else spec.reference(*args)
    meta = meta_outputs(spec, args)
    return exact, (spec.reference(*args) if meta is None else meta)


# -- poisoning -----------------------------------------------------------------------------------

def _poison_value(dtype: torch.dtype):
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    return True if dtype == torch.bool else torch.iinfo(dtype).max


def poison_cuda_cache(nbytes_list: Sequence[int], device: str) -> None:
    """Fill freed blocks of the CUDA caching allocator with NaN: allocate blocks of the sizes the
    outputs will need (and larger neighbours), fill, free. An output the candidate allocates
    with empty() then most likely reuses one, and any element it never writes stays NaN."""
    blocks = []
    for n in nbytes_list:
        for size in (n, n + 512, 2 * n):
            t = torch.empty(max(size, 512) // 2 + 1, dtype=torch.float16, device=device)
            t.fill_(float("nan"))
            blocks.append(t)
    del blocks


@contextlib.contextmanager
def poisoned_empty():
    """Inside the candidate's call, torch.empty*/new_empty return NaN-filled (or junk-int) tensors,
    so an output element the kernel never writes is caught on every device (on the CPU the
    allocator hands out zeroed pages, which would hide it)."""
    originals = {name: getattr(torch, name) for name in ("empty", "empty_like", "empty_strided")}
    orig_new_empty = torch.Tensor.new_empty
    own_new_empty = "new_empty" in vars(torch.Tensor)  # else inherited (TensorBase): leave no attribute behind

    def wrap(fn):
        def poisoned(*args, **kwargs):
            t = fn(*args, **kwargs)
            if isinstance(t, torch.Tensor) and t.numel() and t.device.type != "meta":
                with paused():  # the judge's fill, not the candidate's work
                    t.fill_(_poison_value(t.dtype))
            return t
        return poisoned

    try:
        for name, fn in originals.items():
            setattr(torch, name, wrap(fn))
        torch.Tensor.new_empty = wrap(orig_new_empty)
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)
        if own_new_empty:
            torch.Tensor.new_empty = orig_new_empty
        else:
            del torch.Tensor.new_empty


# -- comparisons ----------------------------------------------------------------------------------

def _flat(obj) -> list:
    return list(obj) if isinstance(obj, (tuple, list)) else [obj]


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


# torch's named tuples (torch.max(x, dim) returns torch.return_types.max): C struct sequences, which
# no class can subclass, with nothing of the candidate's in them
_RETURN_TYPES = tuple(t for t in vars(torch.return_types).values()
                      if isinstance(t, type) and issubclass(t, tuple) and t.__module__ == "torch.return_types")


def require_plain(out, where: str = "output") -> None:
    """Outputs are plain values: a torch.Tensor, or a tuple or list of them, exactly those types.
    A subclass runs its own code inside the judge's checks: a Tensor subclass's __torch_function__
    can make every difference from the reference zero, a list subclass's __iter__ can hand the
    judge other tensors than it returned. Checked with type(), which runs none of its code."""
    plain = torch.Tensor
    if type(out) is plain:
        return
    if type(out) in (tuple, list) or type(out) in _RETURN_TYPES:
        for i, o in enumerate(out):  # iterating an exact tuple or list runs no code of the candidate's
            require_plain(o, f"{where} {i}" if where == "output" else f"{where}[{i}]")
        return
    if isinstance(out, plain) or isinstance(out, (tuple, list)):
        raise CheckFailure(f"{where} is an instance of a subclass of torch.Tensor, tuple or list, not the plain "
                           "type (a subclass runs its own code inside the judge's checks)")


def check_structure(out, meta, device: str) -> list[torch.Tensor]:
    outs, refs = _flat(out), _flat(meta)
    if isinstance(meta, (tuple, list)) != isinstance(out, (tuple, list)) or len(outs) != len(refs):
        raise CheckFailure(f"returned {type(out).__name__} of {len(outs)}, expected {type(meta).__name__} "
                           f"of {len(refs)}")
    for i, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(o, torch.Tensor):
            raise CheckFailure(f"output {i} is a {type(o).__name__}, not a tensor")
        if tuple(o.shape) != tuple(r.shape):
            raise CheckFailure(f"output {i} has shape {tuple(o.shape)}, expected {tuple(r.shape)}")
        if o.dtype != r.dtype:
            raise CheckFailure(f"output {i} has dtype {o.dtype}, expected {r.dtype}")
        if o.device.type != torch.device(device).type:
            raise CheckFailure(f"output {i} is on {o.device}, expected {device}")
    return outs


def check_no_alias(outs: Sequence[torch.Tensor], args: Sequence) -> None:
    for i, o in enumerate(outs):
        if o.numel() == 0:
            continue
        lo, hi = _byte_range(o)
        for j, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.numel():
                alo, ahi = _byte_range(a)
                if lo < ahi and alo < hi:
                    raise CheckFailure(f"output {i} aliases input {j} (shares its memory)")


def snapshot(args: Sequence) -> list:
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def check_inputs_unchanged(before: Sequence, after: Sequence) -> None:
    for j, (b, a) in enumerate(zip(before, after)):
        if isinstance(b, torch.Tensor):
            same = (b == a) | (b != b) & (a != a) if b.is_floating_point() else (b == a)
            if not bool(same.all()):
                raise CheckFailure(f"the kernel wrote into input {j}")


def _all_within(o64: torch.Tensor, r64: torch.Tensor, atol: float, rtol: float) -> tuple[float, float] | None:
    """(max abs error, max rel error) when every element is within tolerance of a finite reference,
    else None (the full walk then says what is wrong). A NaN or Inf in the output gives a NaN or
    Inf error, never within a finite tolerance; a reference's NaN or Inf makes the tolerance
    non-finite, which is refused here."""
    diff = (o64 - r64).abs_()
    ref_abs = r64.abs()
    tol = ref_abs.mul(rtol).add_(atol)
    ok = (diff <= tol).logical_and_(torch.isfinite(tol)).all()
    rel = (diff / ref_abs.clamp_min_(1e-30)).max()  # (compare's slices are never empty)
    flag, max_abs, max_rel = torch.stack([ok.to(torch.float64), diff.max(), rel]).tolist()
    return (max_abs, max_rel) if flag else None


COMPARE_CHUNK = 1 << 24  # elements per float64 slice: a 7.5 GB fp32 output (KB L1 36) compared in parts


def compare(outs: Sequence[torch.Tensor], exact, atol: float, rtol: float) -> tuple[float, float]:
    """Elementwise |out - ref| <= atol + rtol |ref| against the high-precision reference;
    NaN/Inf only where the reference has the same value. Walks the outputs in COMPARE_CHUNK slices
    so that the float64 temporaries stay small next to the tensors themselves."""
    max_abs = max_rel = 0.0
    for i, (o, r) in enumerate(zip(outs, _flat(exact))):
        of, rf = o.detach().reshape(-1), r.detach().reshape(-1)
        n_new_bad = n_bad = 0
        first_new_bad = worst = None  # (flat index, ...) of the first NaN/Inf and of the worst error
        for lo in range(0, of.numel(), COMPARE_CHUNK):
            o64 = of[lo:lo + COMPARE_CHUNK].to(torch.float64)
            r64 = rf[lo:lo + COMPARE_CHUNK].to(device=o.device, dtype=torch.float64)
            passed = _all_within(o64, r64, atol, rtol)
            if passed is not None:  # the common case in a third of the kernels and one wait
                max_abs, max_rel = max(max_abs, passed[0]), max(max_rel, passed[1])
                continue
            o_bad, r_bad = ~torch.isfinite(o64), ~torch.isfinite(r64)
            if bool((o_bad & ~r_bad).any()):
                new = o_bad & ~r_bad
                n_new_bad += int(new.sum())
                if first_new_bad is None:
                    first_new_bad = lo + int(torch.nonzero(new)[0, 0])
                continue
            if bool((r_bad & ~o_bad).any()):
                raise CheckFailure(f"output {i} is finite where the reference is NaN/Inf")
            if bool(r_bad.any()):
                same = (o64[r_bad] == r64[r_bad]) | (torch.isnan(o64[r_bad]) & torch.isnan(r64[r_bad]))
                if not bool(same.all()):
                    raise CheckFailure(f"output {i}: non-finite values differ from the reference's")
            ok = ~r_bad
            if not bool(ok.any()):
                continue
            diff = torch.where(ok, (o64 - r64).abs(), 0.0)
            ref_abs = torch.where(ok, r64.abs(), 0.0)
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / ref_abs.clamp_min(1e-30)).max()))
            excess = diff - (atol + rtol * ref_abs)
            bad = excess > 0
            if bool(bad.any()):
                n_bad += int(bad.sum())
                j = int(torch.argmax(excess))
                if worst is None or float(excess[j]) > worst[0]:
                    worst = (float(excess[j]), float(o64[j]), float(r64[j]))
        if n_new_bad:
            raise CheckFailure(f"output {i} has {n_new_bad} NaN/Inf value(s) where the reference is finite "
                               f"(first at {[int(v) for v in torch.unravel_index(torch.tensor(first_new_bad), o.shape)]})")
        if n_bad:
            raise CheckFailure(f"output {i}: {n_bad} of {of.numel()} elements outside atol={atol:g} rtol={rtol:g} "
                               f"(max abs err {max_abs:.3g}, max rel err {max_rel:.3g}; worst got "
                               f"{worst[1]:.6g}, expected {worst[2]:.6g})")
    return max_abs, max_rel


def run_check(spec: KernelSpec, fn: Callable, inputs: tuple | Callable[[], tuple], device: str, *,
              call_wrapper: Callable | None = None, scale: str = "normal", ledger=None, label: str = "",
              args: tuple | None = None, after_call: Callable[[], None] | None = None) -> CheckReport:
    """Call the candidate once under every guard and judge its output.

    `inputs` makes the inputs (deterministically: every call returns equal values), or is the
    inputs themselves (then copied before the call). The reference is computed after the call,
    from inputs made again. `args`: call with these tensors instead, after copying the made
    inputs' values into them in place (the same memory with new contents: a result cached by
    address fails). `ledger` (across_calls.OutputLedger): earlier outputs that must survive this call.
    `after_call`: run once the call is over, before anything else (the judge's integrity check), and
    once before anything here: a finalizer the candidate hung on an output it returned earlier runs
    when the judge lets go of it, and what it changed must be seen before the inputs are made."""
    if after_call is not None:
        after_call()
    if callable(inputs):
        make = inputs
        made = make()
        if args is not None:
            for a, v in zip(args, made):
                if isinstance(a, torch.Tensor):
                    a.copy_(v)
            made = args
        args = tuple(made)
    else:
        args = tuple(inputs)
        saved = snapshot(args)
        make = lambda: saved  # noqa: E731
    if device.startswith("cuda"):
        meta = meta_outputs(spec, args)  # the outputs' sizes (no values) for the poisoning
        if meta is not None:
            poison_cuda_cache([r.numel() * r.element_size() for r in _flat(meta)], device)
    try:
        with poisoned_empty():
            out = call_wrapper(fn, args) if call_wrapper else fn(*args)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    finally:
        if after_call is not None:
            after_call()
    check_no_alias([o for o in _flat(out) if isinstance(o, torch.Tensor)], args)
    fresh = make()  # after the call: what the inputs were, and what the reference is computed from
    check_inputs_unchanged(fresh, args)
    exact, meta = reference_outputs(spec, fresh)
    outs = check_structure(out, meta, device)
    if ledger is not None:
        ledger.recheck(outs)
    atol, rtol = spec.tolerance(outs[0].dtype if outs[0].is_floating_point() else args[0].dtype, scale)
    max_abs, max_rel = compare(outs, exact, atol, rtol)
    if ledger is not None:
        ledger.accept(label, outs)
    return CheckReport(max_abs, max_rel, out, args)


def strided_copy(t: torch.Tensor, pad: int = 3, offset: int = 5) -> torch.Tensor:
    """The same values in a non-contiguous view with a storage offset: every row padded by `pad`
    NaN elements (a kernel that ignores the row stride reads NaN) and the view starting `offset`
    elements into its storage. The last dim stays unit-stride, as slices of real tensors are."""
    if t.dim() == 0 or t.numel() == 0:
        return t
    shape = list(t.shape)
    strides = [1] * len(shape)
    if len(shape) >= 2:
        strides[-2] = shape[-1] + pad
        for i in range(len(shape) - 3, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
    extent = 1 + sum((s - 1) * st for s, st in zip(shape, strides))
    fill = float("nan") if t.is_floating_point() else 0
    base = torch.full((offset + extent + pad,), fill, dtype=t.dtype, device=t.device)
    view = base.as_strided(shape, strides, storage_offset=offset)
    view.copy_(t)
    return view
