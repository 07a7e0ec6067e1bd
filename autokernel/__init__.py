"""AutoKernel: profile a model, extract its bottleneck kernels, optimize them unattended, verify."""

__version__ = "0.1.0"
