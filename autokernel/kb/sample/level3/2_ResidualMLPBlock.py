"""autokernel sample problem (KernelBench format), not the official KernelBench set."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A pre-norm transformer feed-forward block: x + W2 gelu(W1 LayerNorm(x))."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = self.fc1(self.norm(x))
        h = F.gelu(h)
        return x + self.fc2(h)


tokens = 2048
dim = 2048
hidden = 8192
TINY = {"tokens": 8, "dim": 32, "hidden": 64}


def get_inputs():
    return [torch.randn(tokens, dim)]


def get_init_inputs():
    return [dim, hidden]
