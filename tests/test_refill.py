"""Refill (bench/across_calls.py): what a timed candidate is shown between calls. Large inputs come
from windows of a pool at offsets only the judge knows, drawn again every epoch; every call's
inputs can be made again for its reference, exactly; the memory never moves."""

from __future__ import annotations

import pytest
import torch

from autokernel.bench.across_calls import EPOCH_CALLS, WINDOW_MIN_BYTES, Refill, memory_order
from autokernel.kernels import get_spec

LARGE = {  # each at least WINDOW_MIN_BYTES of inputs in fp32
    "rmsnorm": {"rows": 256, "cols": 1024},
    "matmul": {"M": 256, "N": 256, "K": 512},  # B is a transposed weight: a permuted dense layout
}


def _shape(name):
    return get_spec(name), LARGE[name]


def _tensors(args):
    return [a for a in args if isinstance(a, torch.Tensor)]


def _nbytes(args) -> int:
    return sum(a.numel() * a.element_size() for a in _tensors(args))


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["rmsnorm", "matmul"])
def test_every_windowed_call_is_made_again_exactly_for_its_reference(name, device):
    spec, shape = _shape(name)
    refill = Refill(spec, shape, torch.float32, device)
    assert refill.windowed and _nbytes(refill.args) >= WINDOW_MIN_BYTES
    ptrs = [a.data_ptr() for a in _tensors(refill.args)]
    strides = [a.stride() for a in _tensors(refill.args)]
    # out of order, across epochs and back, negative indices (the judge's untimed calls)
    for i in (5, 0, 3 * EPOCH_CALLS + 1, EPOCH_CALLS - 1, EPOCH_CALLS, -2, 7 * EPOCH_CALLS, 6):
        refill(i)
        again = refill.inputs(i)
        for a, b in zip(refill.args, again):
            if isinstance(a, torch.Tensor):
                assert a.stride() == b.stride() and torch.equal(a, b), i
            else:
                assert a == b
    assert [a.data_ptr() for a in _tensors(refill.args)] == ptrs, "the inputs moved"
    assert [a.stride() for a in _tensors(refill.args)] == strides


@pytest.mark.parametrize("device", DEVICES)
def test_windowed_contents_change_every_call_and_their_values_every_epoch(device):
    spec, shape = _shape("rmsnorm")
    refill = Refill(spec, shape, torch.float32, device)
    seen = set()
    for i in range(2 * EPOCH_CALLS):
        refill(i)
        seen.add(hash(refill.args[0].cpu().numpy().tobytes()))
    assert len(seen) == 2 * EPOCH_CALLS, "the same contents were presented twice"
    refill(0)
    early = refill.args[0].clone()
    refill(4 * EPOCH_CALLS)  # two epochs on: both halves of the pool are new draws
    late = refill.args[0]
    assert torch.isin(late.flatten(), early.flatten()).float().mean() < 0.01
    # and the values stay the spec's: N(0, 1) rows for rmsnorm
    assert abs(float(late.mean())) < 0.05 and abs(float(late.std()) - 1.0) < 0.05


def test_small_inputs_get_a_new_draw_every_call():
    refill = Refill(get_spec("reduce"), {"rows": 4, "cols": 32}, torch.float32, "cpu")
    assert not refill.windowed
    refill(3)
    assert torch.equal(refill.args[0], refill.inputs(3)[0])
    assert not torch.equal(refill.args[0], refill.inputs(4)[0])


def test_memory_order_accepts_only_one_run_of_memory():
    t = torch.zeros(6, 8)
    assert memory_order(t) == [0, 1]
    assert memory_order(t.t()) == [1, 0]
    assert memory_order(torch.zeros(2, 3, 4).permute(2, 0, 1)) == [1, 2, 0]
    assert memory_order(t[:, ::2]) is None  # gaps
    assert memory_order(torch.zeros(1, 8).expand(6, 8)) is None  # broadcast
    assert memory_order(torch.zeros(())) == []


def test_tensors_every_draw_makes_the_same_keep_their_values():
    """rotary's cos/sin tables are the op's setting, not random inputs: a window of them would be a
    table no model uses (and reject a kernel that computes the standard tables itself)."""
    spec = get_spec("rotary_embedding")
    shape = {"batch": 1, "heads": 8, "seq": 256, "head_dim": 128}
    refill = Refill(spec, shape, torch.float32, "cpu")
    assert refill.windowed
    x, cos, sin = (a.clone() for a in refill.args)
    refill(5)
    again = refill.inputs(5)
    assert torch.equal(refill.args[1], cos) and torch.equal(refill.args[2], sin)
    assert not torch.equal(refill.args[0], x)
    assert all(torch.equal(a, b) for a, b in zip(refill.args, again))


WINDOWED = {  # a shape of each kernel type with at least WINDOW_MIN_BYTES of fp32 inputs
    "rmsnorm": {"rows": 256, "cols": 1024}, "layernorm": {"rows": 256, "cols": 1024},
    "softmax": {"rows": 256, "cols": 1024}, "reduce": {"rows": 256, "cols": 1024},
    "cross_entropy": {"rows": 64, "vocab": 4096},
    "rotary_embedding": {"batch": 1, "heads": 8, "seq": 256, "head_dim": 128},
    "matmul": {"M": 256, "N": 256, "K": 512}, "fused_mlp": {"tokens": 128, "hidden": 256, "ffn": 512},
    "flash_attention": {"batch": 1, "heads": 8, "kv_heads": 8, "seq": 256, "head_dim": 64, "causal": 1},
}


@pytest.mark.parametrize("name", sorted(WINDOWED))
def test_every_starter_is_right_on_windowed_inputs(name):
    """Windows keep what the kernel types' inputs must satisfy (targets in range or ignored, ...):
    each Triton starter, timed on them, matches its reference on the calls the judge samples."""
    from autokernel.bench.across_calls import Sampled, spec_expected
    from autokernel.kernelfile import entry_point, import_kernel, read_kernel_file
    from autokernel.kernels import starter_path

    spec = get_spec(name)
    fn = entry_point(import_kernel(read_kernel_file(starter_path(name, "triton"))))
    refill = Refill(spec, spec.canonical_shape(WINDOWED[name]), torch.float32, "cpu")
    assert refill.windowed
    sampled = Sampled(spec_expected(spec, refill))
    for i in (0, 1, EPOCH_CALLS + 1, 2 * EPOCH_CALLS + 6):
        refill(i)
        sampled.take(i, fn(*refill.args))
    assert sampled.verdict() is None


def test_every_kernel_type_has_a_windowed_shape_here():
    from autokernel.kernels.registry import BUILTIN

    assert set(WINDOWED) == set(BUILTIN), "a new kernel type: add a windowed shape for it above"
