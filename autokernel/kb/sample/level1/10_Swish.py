"""autokernel sample problem (KernelBench format), not the official KernelBench set."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Swish: x * sigmoid(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)


batch_size = 4096
dim = 16384
TINY = {"batch_size": 16, "dim": 100}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
