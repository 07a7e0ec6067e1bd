"""CUDA C++ starting kernels, one single-file kernel per type (BACKEND = "cuda").

They follow the convention of autokernel/cuda/build.py: a torch-free CUDA_SRC with a C-style
launcher, a CPP_SRC wrapper against <torch/extension.h>, tunables passed as -D defines.
"""
