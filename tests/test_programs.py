"""Naming the program a call runs (bench/programs.py), under the Triton interpreter: a tunable the
shapes never reach leaves the program as it was, one they reach changes it, a global the kernel reads
is part of it, and a call that launches no Triton kernel has no name."""

from __future__ import annotations

import os

import pytest
import torch

from autokernel.bench import programs
from autokernel.kernelfile import entry_point, import_kernel, parse_source, with_config
from autokernel.kernels import get_spec
from autokernel.kernels.launcher import PLAIN

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                                reason="needs the Triton interpreter or a GPU")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _rmsnorm_source() -> str:
    import autokernel.kernels.rmsnorm as pkg
    from pathlib import Path

    return (Path(pkg.__file__).parent / "triton_starter.py").read_text()


def _names(source: str, config: dict) -> list:
    spec = get_spec("rmsnorm")
    fn = entry_point(import_kernel(parse_source(with_config(source, config))))
    out = programs.at_shapes(fn, spec, spec.small_shapes, "float32", DEVICE, DEVICE == "cuda", lambda: None)
    assert "programs_error" not in out, out
    return [r["program"] for r in out["programs"]]


def test_a_tunable_the_shapes_never_reach_leaves_the_program_as_it_was():
    src = _rmsnorm_source()
    base = _names(src, {})
    assert all(base) and len(set(base)) == len(base)  # every shape named, each its own program
    assert _names(src, {}) == base  # named again: the same
    # the long-row path's chunk: the small shapes' rows all fit the fused path
    assert _names(src, {"LOOP_BLOCK": 2048}) == base
    # the schedule of the fused path: a different program at every shape
    persistent = _names(src, {"SCHEDULE": "persistent"})
    assert all(p != b for p, b in zip(persistent, base))
    assert not PLAIN[0]  # the launcher's cached path is back on


KERNEL = '''
import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"
SCALE = tl.constexpr(2.0)
BLOCK = 64
SEARCH_SPACE = {"BLOCK": [64, 128]}


@triton.jit
def _scaled(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)


def kernel_fn(x):
    out = torch.empty_like(x)
    _scaled[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
    return out
'''


def _one(source: str, x: torch.Tensor):
    fn = entry_point(import_kernel(parse_source(source)))
    fn(x)
    return programs.digest(fn, (x,), DEVICE == "cuda")


def test_what_the_kernel_reads_from_its_module_is_part_of_its_program():
    x = torch.randn(300, device=DEVICE)
    base = _one(KERNEL, x)
    assert base and _one(KERNEL, x) == base
    assert _one(KERNEL.replace("tl.constexpr(2.0)", "tl.constexpr(3.0)"), x) != base  # a global it reads
    assert _one(KERNEL.replace("BLOCK = 64", "BLOCK = 128"), x) != base  # its grid and constexpr
    assert _one(KERNEL.replace("* SCALE,", "* SCALE + 0.0,"), x) != base  # its code
    assert _one(KERNEL + "\nUNUSED = 5\n", x) == base  # what it never reads
    assert _one(KERNEL, torch.randn(301, device=DEVICE)) != base  # another size: another call
    # torch around the launch is part of it too
    assert _one(KERNEL.replace("torch.empty_like(x)", "torch.zeros_like(x)"), x) != base


def test_a_call_without_a_triton_launch_has_no_name():
    x = torch.randn(8, device=DEVICE)
    assert programs.digest(lambda t: t * 2, (x,), DEVICE == "cuda") is None
