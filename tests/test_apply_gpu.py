"""On a GPU: every Triton starter is a triton_op whose launches Inductor sees, opcheck passes, and a
model with AutoKernel compiles with Inductor (default and reduce-overhead) with no graph break and no
recompile caused by AutoKernel (TORCH_LOGS=recompiles,graph_breaks stays silent)."""

from __future__ import annotations

import logging

import pytest
import torch

import autokernel
from autokernel.kernels import KERNEL_TYPES, get_spec, starter_path
from autokernel.models import load_model, output_tensor
from autokernel.ops import register_source

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_triton_starters_are_traceable_triton_ops(kernel_type):
    spec = get_spec(kernel_type)
    op = register_source(starter_path(kernel_type).read_text())
    # a kernel Inductor cannot compile is kept opaque (a custom_op) rather than breaking compiled models;
    # the flash_attention starter was, until its softmax scale was cast to fp32 on entry (Inductor passes
    # a Python float as fp64, which made tl.dot's accumulator fp64): now every starter is traceable
    assert op.kind == "triton_op", op.note
    dtype = torch.float16 if "float16" in spec.dtypes else torch.float32
    args = spec.make_inputs(spec.small_shapes[0], dtype, "cuda", torch.Generator(device="cuda").manual_seed(0))
    result = torch.library.opcheck(op.op, args, test_utils=("test_schema", "test_faketensor",
                                                            "test_aot_dispatch_static"))
    assert set(result.values()) == {"SUCCESS"}, result
    compiled = torch.compile(lambda *a: op.op(*a), dynamic=False, fullgraph=True)
    out, ref = compiled(*args), spec.reference(*args)
    atol, rtol = spec.tolerance(dtype)
    assert torch.allclose(out.float(), ref.float(), atol=atol, rtol=rtol)
    torch._dynamo.reset()


def test_cuda_starter_is_an_opaque_custom_op():
    spec = get_spec("rmsnorm")
    op = register_source(starter_path("rmsnorm", "cuda").read_text())
    assert op.kind == "custom_op" and op.note == "CUDA C++ kernel"
    args = spec.make_inputs({"rows": 64, "cols": 512}, torch.bfloat16, "cuda", torch.Generator(device="cuda"))
    assert set(torch.library.opcheck(op.op, args).values()) == {"SUCCESS"}


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_llama_with_autokernel_compiles_without_recompiles_or_graph_breaks(tmp_path, mode):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    b = load_model("llama", seq=128, dtype="bf16")
    with torch.inference_mode():
        ref = output_tensor(b.forward()).float()
    handle = autokernel.apply(b.model, kernels=["rmsnorm", "rotary_embedding"], home=tmp_path, use_unmeasured=True)
    records = _Records()
    torch._logging.set_logs(recompiles=True, graph_breaks=True)
    for name in ("torch._dynamo", "torch.__recompiles", "torch.__graph_breaks"):
        logging.getLogger(name).addHandler(records)
    # every input made the same way (outside inference mode): an inference tensor among normal ones
    # would recompile torch.compile with or without AutoKernel (a dispatch-key guard)
    inputs = [b.make_inputs(seed) for seed in (1, 2, 3, 4)] + [b.inputs]
    try:
        compiled = torch.compile(b.model, mode=mode)
        with torch.inference_mode():
            for inp in inputs:
                out = output_tensor(compiled(**inp)).float()
    finally:
        torch._logging.set_logs()
        for name in ("torch._dynamo", "torch.__recompiles", "torch.__graph_breaks"):
            logging.getLogger(name).removeHandler(records)
        handle.remove()
    assert not [m for m in records.messages if "ecompil" in m or "raph break" in m], records.messages
    assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 1
    rel = ((out - ref).norm() / ref.norm()).item()
    assert rel < 3e-2, rel
    torch._dynamo.reset()
