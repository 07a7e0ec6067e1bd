"""The calls of a KernelBench problem the reduce starter computes, adapted to the starter's sum_dim."""

from autokernel.kernels.reduce.triton_starter import sum_dim


def _kb_sum(x, dim=None, keepdim=False):
    """torch.sum(x, dim, keepdim) over one dim, adjacent dims or all of x (None), x read in place."""
    return sum_dim(x, dim, keepdim)


def _kb_mean(x, dim=None, keepdim=False):
    return sum_dim(x, dim, keepdim, mean=True)
