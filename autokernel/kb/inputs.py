"""A KernelBench problem's inputs and reference, as the judge makes them.

Inputs always come from the problem file's get_inputs() under a seed, so they can be made again:
the judge calls ModelNew first and only then makes the inputs once more and builds and runs the
reference Model (under the construction seed, so it has ModelNew's weights; `Reference`). While
ModelNew runs, no reference model, output or expected tensor exists for it to find. `Inputs.refill(i)` gives
the same tensors the values of seed i in place (the same memory, new contents), which is how
timing presents its repetitions: a result cached by address or by contents is never right there.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch


def tolerance(dtype) -> tuple[float, float]:
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 1e-2
    return 1e-4, 1e-4


def flat(obj) -> list:
    return list(obj) if isinstance(obj, (tuple, list)) else [obj]


def to_device(a, device):
    return a.to(device) if isinstance(a, torch.Tensor) else a


def build_model(cls, init: list, device: str, seed: int):
    """`cls(*init)` under `seed`, made on `device`: the reference Model and ModelNew alike, so both
    draw their weights from the same generator in the same order (the same weights). Made on the
    device, not made on the host and moved: the judge builds the reference anew for every trial and
    every sampled timed output, and on the host L3 2's 2.15 billion parameters (one of its layers
    took 8.45 s to initialise on 2 cores) ran the start past its time limit."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls(*init)
    return model.to(device)


def make_inputs(prob, device: str) -> list:
    """prob.get_inputs() with the device as the default for its factories: problems that
    sample a billion values (L1 94 draws two 32768^2 Pareto tensors) would spend minutes doing it
    on the host and then copying; tensors it places itself are moved."""
    with torch.device(device):
        return [to_device(a, device) for a in prob.get_inputs()]


def clone(args) -> list:
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _state(model) -> list:
    """What a forward may change in a model: its buffers, and its modules' plain and tensor
    attributes (a call counter, a cached tensor), copied."""
    out: list = []
    for m in model.modules():
        out += [b.detach().clone() for b in m.buffers(recurse=False)]
        for k, v in vars(m).items():
            if isinstance(v, torch.Tensor):
                out.append((k, v.detach().clone()))
            elif not k.startswith("_") and isinstance(v, (bool, int, float, str, type(None))):
                out.append((k, v))
    return out


def _same_state(a: list, b: list) -> bool:
    def same(x, y) -> bool:
        if isinstance(x, tuple):
            return isinstance(y, tuple) and x[0] == y[0] and same(x[1], y[1])
        if isinstance(x, torch.Tensor):
            # a tensor the forward moved (L3 33 keeps its hidden state on the host and moves it to the
            # input's device) is changed state; torch.equal across devices would raise instead
            return (isinstance(y, torch.Tensor) and (x.device, x.dtype, x.shape) == (y.device, y.dtype, y.shape)
                    and torch.equal(x, y))
        return x == y

    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


class Reference:
    """The problem's Model for the candidate's calls in order: built anew for each, after that call,
    under the construction seed (ModelNew's weights), and run on the call's inputs made again, so
    that no reference model or output exists while the candidate runs. A stateful forward (a call
    counter, BatchNorm's running statistics in training mode) shows at the first call; from then on
    the reference first replays the inputs of the candidate's earlier calls, so it starts from the
    state the candidate's model reached through the same calls (KernelBench calls one Model and one
    ModelNew in step)."""

    def __init__(self, prob, init: list, device: str, model_seed: int):
        self.prob, self.init, self.device, self.model_seed = prob, init, device, model_seed
        self.stateful: bool | None = None  # learnt at the first call

    def outputs(self, inputs: list, earlier: Callable[[], Iterable[list]] = tuple, wide: bool = False):
        """The reference's output (a tensor, or a tuple/list of them) detached, for a call on
        `inputs` after calls on each of `earlier()` (replayed only when the forward is stateful).
        `wide`: the same model and inputs in float64 (what the fp32 answer approximates)."""
        ref = build_model(self.prob.Model, self.init, self.device, self.model_seed)
        if wide:
            ref = ref.double()
            inputs = _wide(inputs)
        with torch.no_grad():
            if self.stateful:
                for args in earlier():
                    ref(*(_wide(args) if wide else args))
            before = _state(ref) if self.stateful is None else None
            out = ref(*inputs)
            if before is not None:
                self.stateful = not _same_state(before, _state(ref))
        if self.device == "cuda":
            torch.cuda.synchronize()
        del ref
        if isinstance(out, (tuple, list)):
            return type(out)(o.detach() if isinstance(o, torch.Tensor) else o for o in out)
        return out.detach() if isinstance(out, torch.Tensor) else out


def _wide(args: list) -> list:
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


class Inputs:
    """The problem's inputs under seeds: made(i) makes seed i's inputs anew; refill(i) writes
    them into `args` in place."""

    def __init__(self, prob, device: str, base_seed: int):
        self.prob, self.device, self.base = prob, device, base_seed
        self.args = self.made(0)

    def seed(self, i: int) -> int:
        return self.base + 1 + i

    def made(self, i: int) -> list:
        torch.manual_seed(self.seed(i))
        return make_inputs(self.prob, self.device)

    def refill(self, i: int) -> list:
        for a, v in zip(self.args, self.made(i)):
            if isinstance(a, torch.Tensor):
                a.copy_(v)
        return self.args
