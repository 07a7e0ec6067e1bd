"""Planted fault: not valid Python -> compile_error."""

KERNEL_TYPE = "reduce"
BACKEND = "triton"


def kernel_fn(x)
    return x
