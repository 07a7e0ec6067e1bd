"""The calls of a KernelBench problem the flash_attention starter computes, adapted to the starter's attention."""

from autokernel.kernels.flash_attention.triton_starter import kernel_fn


def _kb_sdpa(q, k, v, causal=False, scale=None):
    return kernel_fn(q, k, v, causal, scale)
