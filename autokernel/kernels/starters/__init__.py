"""Triton starting kernels, one single-file kernel per type (BACKEND = "triton").

Each is the loop's first candidate: tunables are module-level literals with a SEARCH_SPACE, and
kernel_fn has the signature and result of its spec's reference.
"""
