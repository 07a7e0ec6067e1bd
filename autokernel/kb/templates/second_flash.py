"""The flash starter as a second one in a file (its names prefixed _fa_), next to the matmul starter."""

from autokernel.kernels.flash_attention.triton_starter import kernel_fn as _fa_kernel_fn


def _kb_sdpa(q, k, v, causal=False, scale=None):
    return _fa_kernel_fn(q, k, v, causal, scale)
