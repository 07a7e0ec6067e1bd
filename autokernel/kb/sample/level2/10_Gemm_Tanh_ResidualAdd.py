"""autokernel sample problem (KernelBench format), not the official KernelBench set."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear (square), tanh, plus the input (residual)."""

    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.tanh(self.linear(x)) + x


batch_size = 2048
features = 4096
TINY = {"batch_size": 16, "features": 40}


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
