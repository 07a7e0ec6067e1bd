import torch
import torch.nn as nn


class Model(nn.Module):
    """The planted KernelBench cheats' problem on a GPU: y = relu(x) on 64M elements, so that the library op is
    most of the GPU time beside a throwaway launch (at 4K elements the two take about as long)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8192, 8192)]


def get_init_inputs():
    return []
