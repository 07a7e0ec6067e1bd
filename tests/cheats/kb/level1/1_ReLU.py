import torch
import torch.nn as nn


class Model(nn.Module):
    """The planted KernelBench cheats' problem: y = relu(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 256)]


def get_init_inputs():
    return []
