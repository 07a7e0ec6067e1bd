"""Why a KernelBench problem's reference cannot tell a correct kernel from a wrong one, asked by the
judge (worker.py) next to its correctness trials: an output that is constant or entirely within the
tolerance of zero (a constant answer would pass), a forward that draws random numbers (no candidate
can match it), or a tolerance finer than torch's own arithmetic (asked only after a miss).

Outputs are walked in COMPARE_CHUNK slices, as the judge's compare does: a float64 copy of a whole
multi-GB output next to the candidate's and the reference's ran an H100 out of memory (KernelBench
L1 63: an 8.5 GB fp32 output, whose float64 copy and the mask of its finite values took 19 GB more).
"""

from __future__ import annotations

import math


def _slices(t):
    """t's elements as COMPARE_CHUNK-long slices of one flat view (a copy only where t is not dense)."""
    from autokernel.bench.checks import COMPARE_CHUNK

    flat_t = t.detach().reshape(-1)
    for lo in range(0, flat_t.numel(), COMPARE_CHUNK):
        yield flat_t[lo:lo + COMPARE_CHUNK]


def differs(got, want, atol: float, rtol: float) -> float | None:
    """The largest |got - want| where the two are not allclose (|got - want| <= atol + rtol |want|,
    NaN equal to NaN; in float64, slice by slice), else None."""
    import torch

    pairs = list(zip(_slices(got), _slices(want)))
    if all(torch.allclose(g.double(), w.double(), atol=atol, rtol=rtol, equal_nan=True) for g, w in pairs):
        return None
    return max(float((g.double() - w.double()).abs().nan_to_num(0.0).max()) for g, w in pairs)


def degenerate_reason(exact: list, atol: float, rtol: float) -> str | None:
    """Why a reference output makes the problem degenerate (a constant answer would pass), or None.
    Over the finite values of all floating outputs together."""
    import torch

    n, amax, lo, hi, abs_sum = 0, 0.0, math.inf, -math.inf, 0.0
    for t in exact:
        if not (isinstance(t, torch.Tensor) and t.is_floating_point()):
            continue
        for part in _slices(t):
            v = part.double()
            v = v[torch.isfinite(v)]
            if not v.numel():
                continue
            n += v.numel()
            amax = max(amax, float(v.abs().max()))
            lo, hi = min(lo, float(v.min())), max(hi, float(v.max()))
            abs_sum += float(v.abs().sum())
    if not n:
        return None
    if amax <= atol:
        return f"reference output is within the tolerance of zero everywhere (max |y| = {amax:.3g})"
    spread = hi - lo
    if n > 1 and spread <= atol + rtol * abs_sum / n:
        return f"reference output is constant (spread {spread:.3g})"
    return None


def _copy_or_none(model):
    """A deep copy of the reference, or None where it cannot be copied (the check is then left out)."""
    import copy

    try:
        return copy.deepcopy(model)
    except Exception:
        return None


def random_reference(prob, init: list, device: str, model_seed: int, inputs: list, exact: list,
                     atol: float, rtol: float) -> str | None:
    """Why no candidate can match the reference, or None: a copy of the reference taken before its
    first call (a stateful forward starts from the same state), called after it, gives other values
    on the same inputs: the forward draws random numbers (dropout in training mode, L2 66 / 83).
    Differences within the tolerance (a random initial state an LSTM forgets) are not counted."""
    import torch

    from autokernel.kb.inputs import build_model, flat

    ref = build_model(prob.Model, init, device, model_seed)
    twin = _copy_or_none(ref)
    if twin is None:
        return None
    with torch.no_grad():
        ref(*[a.clone() if isinstance(a, torch.Tensor) else a for a in inputs])  # the RNG moves on as it did
        again = flat(twin(*[a.clone() if isinstance(a, torch.Tensor) else a for a in inputs]))
    for want, got in zip(exact, again):
        if isinstance(want, torch.Tensor) and want.is_floating_point() and isinstance(got, torch.Tensor) \
                and got.shape == want.shape:
            err = differs(got, want, atol, rtol)
            if err is not None:
                return f"reference output is random: a second call on the same inputs differs (max abs {err:.3g})"
    return None


def ill_conditioned(reference, inputs: list, earlier, exact: list, atol: float, rtol: float) -> str | None:
    """Why the tolerance is finer than the problem's own arithmetic, or None: torch's output (`exact`,
    in the problem's dtype) is itself outside the tolerance of the same model run in float64 on the
    same inputs, so a correct kernel that sums in another order can miss it as torch does (L3 49's
    exp of cumulative sums: torch's fp32 misses fp64 by 1.5x the 1e-4 tolerance on one seed of five).
    Asked only after a candidate's values missed; the candidate stays incorrect, the problem is
    reported apart. A forward that cannot run in float64 gives None."""
    import torch

    from autokernel.kb.inputs import flat

    try:
        wide = flat(reference.outputs(inputs, earlier, wide=True))
    except Exception:  # noqa: BLE001 - a dtype-specific forward (an explicit .float(), a half-only op)
        return None
    for want, got in zip(exact, wide):
        if isinstance(want, torch.Tensor) and want.is_floating_point() and isinstance(got, torch.Tensor) \
                and got.shape == want.shape:
            err = differs(want, got, atol, rtol)
            if err is not None:
                return (f"ill-conditioned at atol={atol:g} rtol={rtol:g}: torch's own "
                        f"{str(want.dtype).replace('torch.', '')} output misses the float64 answer (max abs {err:.3g})")
    return None
