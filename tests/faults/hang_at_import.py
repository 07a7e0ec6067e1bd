"""Planted fault: hangs while its module is imported -> timeout (the load stage's alarm), not a
crash or a compile error (the import wrapper catches every Exception; the alarm is not one)."""

import time

KERNEL_TYPE = "reduce"
BACKEND = "triton"

time.sleep(3600)


def kernel_fn(x):
    return x.sum(-1)
