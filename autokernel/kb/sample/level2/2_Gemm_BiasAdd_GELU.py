"""autokernel sample problem (KernelBench format), not the official KernelBench set."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear without bias, a separate learnable bias, then GELU."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.02)

    def forward(self, x):
        x = self.linear(x)
        x = x + self.bias
        return F.gelu(x)


batch_size = 2048
in_features = 4096
out_features = 4096
TINY = {"batch_size": 16, "in_features": 32, "out_features": 48}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
