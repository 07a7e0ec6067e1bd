"""Planted fault: fails when imported -> compile_error."""

import triton_that_does_not_exist  # noqa: F401

KERNEL_TYPE = "reduce"
BACKEND = "triton"


def kernel_fn(x):
    return x.sum(-1)
