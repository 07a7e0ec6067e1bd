"""autokernel sample problem (KernelBench format), not the official KernelBench set."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear, max over features (keepdim), minus its own mean over that size-1 dim, GELU.
    DEGENERATE on purpose: x - x.mean(dim=1) of a [B, 1] tensor is exactly zero, so the output is
    all zeros whatever the input (KernelBench has problems like this; they are reported apart)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.max(x, dim=1, keepdim=True).values
        x = x - x.mean(dim=1, keepdim=True)
        return F.gelu(x)


batch_size = 2048
in_features = 4096
out_features = 4096
TINY = {"batch_size": 16, "in_features": 32, "out_features": 48}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
