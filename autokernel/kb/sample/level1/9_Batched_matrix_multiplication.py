"""autokernel sample problem (KernelBench format), not the official KernelBench set."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """C[b] = A[b] @ B[b]."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)


batch = 16
M = 512
K = 1024
N = 512
TINY = {"batch": 2, "M": 32, "K": 48, "N": 40}


def get_inputs():
    return [torch.randn(batch, M, K), torch.randn(batch, K, N)]


def get_init_inputs():
    return []
