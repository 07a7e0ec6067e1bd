"""autokernel sample problem (KernelBench format), not the official KernelBench set."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LayerNorm over the last dim, with learnable weight and bias."""

    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        return self.ln(x)


batch_size = 8192
dim = 4096
TINY = {"batch_size": 16, "dim": 96}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
