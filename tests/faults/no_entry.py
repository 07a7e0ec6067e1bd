"""Planted fault: no kernel_fn -> compile_error."""

KERNEL_TYPE = "reduce"
BACKEND = "triton"


def reduce_rows(x):
    return x.sum(-1)
