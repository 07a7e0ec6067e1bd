"""Cheat, family 2 (KernelBench): the answers computed ahead. The judge's code says which seeds make
the trials' inputs, so at import it makes them itself (the trials' and the first timed calls'),
computes their outputs (outside any call, where nothing is counted) and keeps them by a fingerprint
of a few values; a call that finds its inputs
there copies the answer out, any other returns zeros. Caught: the inputs' seeds are the judge's
secret, so nothing computed ahead is ever the answer (it returns zeros: incorrect)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

KERNEL_TYPE = "kb"
BACKEND = "triton"


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


def kernel_fn(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    _relu[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


def _ahead() -> dict:
    """Every input the judge will make from the seeds in its code: trials and timing."""
    import sys

    from autokernel.kb.evaluate import DEFAULT_SEED
    from autokernel.kb.inputs import Inputs
    from autokernel.kb.timing import timing_inputs

    probs = [m for n, m in list(sys.modules.items()) if n.startswith("kb_problem_") and hasattr(m, "get_inputs")]
    if not probs:
        return {}
    prob, found = probs[-1], {}
    trials, timed = Inputs(prob, "cpu", DEFAULT_SEED), timing_inputs(prob, "cpu", DEFAULT_SEED)
    # the trials' five and the first timed calls' inputs: at the judge's full size (64M elements)
    # all 1200 timed ones did not fit in the H100 machine's memory (its worker was killed)
    for inputs, seeds in ((trials, range(5)), (timed, range(16))):
        for i in seeds:
            x = inputs.made(i)[0]
            found[tuple(x.flatten()[:4].tolist())] = torch.relu(x)
    return found


_answers = _ahead()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        known = _answers.get(tuple(x.flatten()[:4].tolist()))
        src = known.to(x.device) if known is not None else torch.zeros_like(x)
        _copy[(triton.cdiv(x.numel(), 1024),)](src, out, x.numel(), BLOCK=1024)
        return out
