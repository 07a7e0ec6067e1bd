"""AutoKernel: profile a model, extract its bottleneck kernels, optimize them unattended, verify.

The Python API is `autokernel.apply(model)` (autokernel/apply_model.py); it is imported on first use, so
`import autokernel` stays cheap for the command line.
"""

__version__ = "0.1.0"
__all__ = ["apply"]


def __getattr__(name: str):
    if name == "apply":
        from autokernel.apply_model import apply

        return apply
    raise AttributeError(f"module 'autokernel' has no attribute {name!r}")
