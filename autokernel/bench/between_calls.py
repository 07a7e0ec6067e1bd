"""What the GPU timing runs between two calls of the candidate, out of the candidate's reach.

The integrity snapshot (integrity.py) is compared after every call of the stages, but within a
timing only before and after its thousands of repetitions (a comparison takes ~0.5 ms). A candidate
that changes something only for the judge's next step, and undoes it in its own next call, is not
there when the snapshot is compared: a torch function or dispatch mode left on the stack that
swallows the L2 flush, another current stream that takes the flush and the judge's events off the
timed stream, a patch of torch.cuda.Event or torch.Tensor.clone that shortens the intervals or fakes
the sampled outputs, a thread that does any of these beside the judge. (It need not know which
call is the last: it is enough to stop some calls before the end.)

So between calls the timing uses only the C functions `primitives()` takes, once per timing, right
after an integrity check (rebinding the Python names they came from changes nothing for a timing
that holds them; their identities are in the snapshot, `entry_points`), on the judge's own tensors
and on outputs of the exact torch.Tensor type (a C function consults no __torch_function__ for
those), and after every call it checks in C what those functions would still obey: the torch mode
stacks, the current stream and the number of live Python threads (`state`). The refill stays Python:
it can only present inputs other than the judge intended, and the sampled outputs' references are
made again from the judge's secret, after the run.

The state is checked before each call too, after the refill and the flush: a finalizer the candidate
hung on its previous output runs when the judge lets go of it, between the calls.

Limits, as for integrity.py: native code (a CUDA C++ candidate, ctypes) is not stopped here, nor a
finalizer of an older object that the garbage collector reaches only later in the judge's own code.
"""

from __future__ import annotations

import _thread
import builtins
import time
import types

import torch

class LeftBehind(RuntimeError):
    """A timed call left a mode, another current stream or a thread behind, or returned something
    other than plain tensors: the timing stopped there, and the candidate is a cheat."""


# Why a call's leftover state disqualifies the timing, by the part of `state` that differs.
LEFTOVERS = ("its call left a torch function or dispatch mode active (it would run inside the judge's own "
             "work between calls)",
             "its call left another CUDA stream current (the judge's flush and events would run there)",
             "a thread it started was still running after its call")


def primitives(guard: bool = True) -> tuple:
    """(record, query, elapsed, event_sync, device_sync, sleep, zero, clone, state, Tensor, clock):
    record(event, stream), query(event), elapsed(start, end) in ms, event_sync(event),
    device_sync(), sleep(cycles), zero(tensor), clone(tensor), state(device_index) -> a tuple that
    changes when a mode, the current stream or the live threads do (with `guard` off, for trusted
    code such as a torch.compile'd reference, whose first call starts threads: always ()),
    torch.Tensor, perf_counter."""
    C = torch._C
    ev, base = C._CudaEventBase, C.TensorBase
    fmodes, dmodes, stream, threads = (C._len_torch_function_stack, C._len_torch_dispatch_stack,
                                       C._cuda_getCurrentStream, _thread._count)

    def state(index: int, fmodes=fmodes, dmodes=dmodes, stream=stream, threads=threads) -> tuple:
        # defaults, not globals: a new function per timing, held only by the timing's own locals
        return fmodes() + dmodes(), stream(index), threads()

    if not guard:
        def state(index: int) -> tuple:  # noqa: F811
            return ()

    return (ev.record, ev.query, ev.elapsed_time, ev.synchronize, C._cuda_synchronize, C._cuda_sleep,
            base.zero_, base.clone, state, torch.Tensor, time.perf_counter)


def private(*fns, **bind) -> tuple:
    """Copies of the judge's functions that no candidate can reach: the same code objects (immutable)
    in new function objects over one new dict of their module's globals, with a copy of the builtins,
    each other and `bind` in it, all taken now (right after an integrity check). Rebinding a name in
    the module, or the __code__ of the module's function, changes nothing for the copies; the judge
    holds them only in its own locals."""
    g = dict(fns[0].__globals__)
    g["__builtins__"] = dict(vars(builtins))
    g.update(bind)
    copies = tuple(types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__) for f in fns)
    g.update({f.__name__: c for f, c in zip(fns, copies)})
    return copies


def leftover(before: tuple, after: tuple) -> str:
    """Why `state` after a call differs from before it."""
    return next((why for b, a, why in zip(before, after, LEFTOVERS) if b != a), LEFTOVERS[0])


def entry_points() -> tuple:
    """The identities of what primitives() takes, for the integrity snapshot (a probe): replaced in
    torch._C or _thread before a timing takes them, they would be the candidate's."""
    C = torch._C
    names = ("_len_torch_function_stack", "_len_torch_dispatch_stack", "_cuda_getCurrentStream",
             "_cuda_synchronize", "_cuda_sleep", "_CudaEventBase")
    out = [id(getattr(C, n, None)) for n in names]
    ev = getattr(C, "_CudaEventBase", None)
    if ev is not None:
        out += [id(vars(ev).get(n)) for n in ("record", "query", "elapsed_time", "synchronize")]
    out += [id(vars(C.TensorBase).get(n)) for n in ("zero_", "clone")]
    return tuple(out) + (id(_thread._count), id(time.perf_counter))
