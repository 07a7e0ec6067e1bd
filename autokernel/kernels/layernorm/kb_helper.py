"""The calls of a KernelBench problem the layernorm starter computes, adapted to the starter's row layer norm."""

from autokernel.kernels.layernorm.triton_starter import kernel_fn


def _kb_layer_norm(x, weight, bias, eps):
    # normalized_shape may span several trailing dims (weight has its shape): one row of their product
    cols = weight.numel()
    return kernel_fn(x.reshape(-1, cols), weight.reshape(-1), bias.reshape(-1), eps).reshape(x.shape)
