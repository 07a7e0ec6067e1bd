"""A KernelBench problem's inputs and reference, as the judge makes them.

Inputs always come from the problem file's get_inputs() under a seed, so they can be made again:
the judge calls ModelNew first and only then makes the inputs once more and builds and runs the
reference Model (under the construction seed, so it has ModelNew's weights). While ModelNew runs,
no reference model, output or expected tensor exists for it to find. `Inputs.refill(i)` gives
the same tensors the values of seed i in place (the same memory, new contents), which is how
timing presents its repetitions: a result cached by address or by contents is never right there.
"""

from __future__ import annotations

import torch


def tolerance(dtype) -> tuple[float, float]:
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 1e-2
    return 1e-4, 1e-4


def flat(obj) -> list:
    return list(obj) if isinstance(obj, (tuple, list)) else [obj]


def to_device(a, device):
    return a.to(device) if isinstance(a, torch.Tensor) else a


def make_inputs(prob, device: str) -> list:
    """prob.get_inputs() with the device as the default for its factories: problems that
    sample a billion values (L1 94 draws two 32768^2 Pareto tensors) would spend minutes doing it
    on the host and then copying; tensors it places itself are moved."""
    with torch.device(device):
        return [to_device(a, device) for a in prob.get_inputs()]


def clone(args) -> list:
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def reference_outputs(prob, init: list, device: str, model_seed: int, inputs: list):
    """The problem's Model, built now under `model_seed` (ModelNew's weights), run on `inputs`;
    its output (a tensor, or a tuple/list of them) detached."""
    torch.manual_seed(model_seed)
    ref = prob.Model(*init).to(device)
    with torch.no_grad():
        out = ref(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    del ref
    if isinstance(out, (tuple, list)):
        return type(out)(o.detach() if isinstance(o, torch.Tensor) else o for o in out)
    return out.detach() if isinstance(out, torch.Tensor) else out


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
