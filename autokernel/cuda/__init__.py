"""CUDA C++ kernels: the build helper (build.py); the CUDA starting kernels live in their types' folders
(autokernel/kernels/<type>/cuda_starter.py)."""

from autokernel.cuda.build import (DTYPE_BF16, DTYPE_F16, DTYPE_F32, compile_check, dtype_code,
                                   load_extension, nvcc_available, toolchain_missing)

__all__ = ["DTYPE_BF16", "DTYPE_F16", "DTYPE_F32", "compile_check", "dtype_code", "load_extension",
           "nvcc_available",
           "toolchain_missing"]
