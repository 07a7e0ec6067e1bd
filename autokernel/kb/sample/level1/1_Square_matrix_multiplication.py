"""autokernel sample problem (KernelBench format), not the official KernelBench set."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """C = A @ B for square matrices."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


N = 2048
TINY = {"N": 64}


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
