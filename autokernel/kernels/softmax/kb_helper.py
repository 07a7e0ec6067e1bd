"""The calls of a KernelBench problem the softmax starter computes, adapted to the starter's row softmax."""

from autokernel.kernels.softmax.triton_starter import kernel_fn


def _kb_softmax(x, dim=-1, contiguous=False, log=False):
    """softmax(x, dim) (log_softmax with `log`) for one dim, as the row softmax of a
    [rows, x.shape[dim]] matrix."""
    dim = dim % x.dim()
    n = x.shape[dim]
    if dim == x.dim() - 1:
        return kernel_fn(x.reshape(-1, n), log).reshape(x.shape)
    # Moved last with a copy: read in place, each row would be strided by the inner size (one
    # element per row of a column, uncoalesced).
    moved = x.movedim(dim, -1).contiguous()
    y = kernel_fn(moved.reshape(-1, n), log).reshape(moved.shape).movedim(-1, dim)
    # y is a permuted view (dim 1 of NCDHW: channels-last strides), which torch ops take as it
    # is; the generator asks for x's layout back only where a .view or the model's return needs it.
    return y.contiguous() if contiguous else y
