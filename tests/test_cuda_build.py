"""The CUDA build helper: flags, hashing, rendering, nvcc compile checks that catch real errors
(CPU, needs nvcc), and on the GPU real builds that are cached in the process and on disk."""

from __future__ import annotations

import pytest
import torch

from autokernel.cuda import build
from autokernel.cuda.build import compile_check, load_extension, nvcc_available
from autokernel.errors import KernelFileError

HAS_CUDA = torch.cuda.is_available()
needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed")
needs_toolchain = pytest.mark.skipif(HAS_CUDA and build.toolchain_missing() is not None,
                                     reason=f"cannot build CUDA extensions: {build.toolchain_missing()}")

FILL_CU = r"""
#ifndef FILL_VALUE
#error "FILL_VALUE must be defined"
#endif
__global__ void fill_kernel(float* y, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = (float)FILL_VALUE + (float)i;
}
cudaError_t fill_launch(float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(y, n);
  return cudaGetLastError();
}
"""

FILL_CPP = r"""
cudaError_t fill_launch(float* y, int64_t n, cudaStream_t stream);

torch::Tensor fill(torch::Tensor like, int64_t n, int64_t stream) {
  auto y = torch::empty({n}, like.options().dtype(torch::kFloat32));
  cudaError_t err = fill_launch(y.data_ptr<float>(), n, reinterpret_cast<cudaStream_t>(stream));
  TORCH_CHECK(err == cudaSuccess, "fill failed: ", cudaGetErrorString(err));
  return y;
}
"""


def test_define_flags():
    assert build._define_flags({"B": 2, "A": "x", "C": True}) == ["-DA=x", "-DB=2", "-DC=1"]
    assert build._define_flags(None) == []
    with pytest.raises(KernelFileError, match="not an identifier"):
        build._define_flags({"A; rm": 1})


def test_build_hash_covers_inputs():
    base = build.build_hash("k", "cu", "cpp", ["f"], ["-DA=1"])
    assert base == build.build_hash("k", "cu", "cpp", ["f"], ["-DA=1"])
    variants = [build.build_hash("k", "cu2", "cpp", ["f"], ["-DA=1"]),
                build.build_hash("k", "cu", "cpp2", ["f"], ["-DA=1"]),
                build.build_hash("k", "cu", "cpp", ["g"], ["-DA=1"]),
                build.build_hash("k", "cu", "cpp", ["f"], ["-DA=2"]),
                build.build_hash("k2", "cu", "cpp", ["f"], ["-DA=1"])]
    assert len({base, *variants}) == 6


def test_render_units():
    cpp = build.render_cpp("int f() { return 1; }", ["f", "g"])
    assert cpp.startswith("#include <torch/extension.h>") and "int f()" in cpp
    assert 'm.def("f", &f, "f");' in cpp and 'm.def("g", &g, "g");' in cpp and "PYBIND11_MODULE" in cpp
    cu = build.render_cu("__global__ void k() {}")
    assert "torch" not in cu and "#include <cuda_bf16.h>" in cu and cu.endswith("__global__ void k() {}")


def test_dtype_codes_and_arch():
    assert [build.dtype_code(d) for d in (torch.float32, torch.float16, torch.bfloat16)] == [0, 1, 2]
    with pytest.raises(KernelFileError):
        build.dtype_code(torch.int64)
    if not HAS_CUDA:
        assert build.arch_flags() == ["-gencode=arch=compute_90,code=sm_90"]
        assert build.arch_flags(sm90a=True) == ["-gencode=arch=compute_90a,code=sm_90a"]


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU error")
def test_load_extension_without_gpu(home):
    assert build.toolchain_missing() == "no CUDA device"
    with pytest.raises(KernelFileError, match="no CUDA device"):
        load_extension("fill", FILL_CU, FILL_CPP, ["fill"], defines={"FILL_VALUE": 1})


@needs_nvcc
def test_compile_check_nvcc_part():
    compile_check(FILL_CU, None, defines={"FILL_VALUE": 3})
    # Defines reach the compiler: without FILL_VALUE the source's #error fires.
    with pytest.raises(KernelFileError, match="FILL_VALUE must be defined") as info:
        compile_check(FILL_CU, None)
    assert "nvcc failed" in str(info.value)
    with pytest.raises(KernelFileError, match="nvcc failed") as info:
        compile_check(FILL_CU.replace("(float)i;", "(float)j;"), None, defines={"FILL_VALUE": 3})
    assert '"j"' in str(info.value) or "identifier" in str(info.value)


@needs_nvcc
def test_compile_check_host_part():
    """The host unit is checked too (against torch's headers, with its pybind11 bindings): a
    wrapper calling an undeclared function fails while the .cu part passes."""
    bad = FILL_CPP.replace("fill_launch(y.data_ptr<float>()", "fill_lunch(y.data_ptr<float>()")
    with pytest.raises(KernelFileError, match="c\\+\\+ failed") as info:
        compile_check(FILL_CU, bad, defines={"FILL_VALUE": 3}, functions=["fill"])
    assert "fill_lunch" in str(info.value) and "nvcc failed" not in str(info.value)


@pytest.mark.gpu
@needs_toolchain
def test_load_extension_builds_and_caches(home):
    stream = torch.cuda.current_stream().cuda_stream
    like = torch.empty(1, device="cuda")
    mod = load_extension("fill", FILL_CU, FILL_CPP, ["fill"], defines={"FILL_VALUE": 5})
    torch.testing.assert_close(mod.fill(like, 1000, stream).cpu(), 5 + torch.arange(1000.0))
    assert load_extension("fill", FILL_CU, FILL_CPP, ["fill"], defines={"FILL_VALUE": 5}) is mod
    built = list((home.cache / "cuda").iterdir())
    assert len(built) == 1 and any(p.suffix == ".so" for p in built[0].iterdir())
    other = load_extension("fill", FILL_CU, FILL_CPP, ["fill"], defines={"FILL_VALUE": 7})
    assert other is not mod and len(list((home.cache / "cuda").iterdir())) == 2
    torch.testing.assert_close(other.fill(like, 10, stream).cpu(), 7 + torch.arange(10.0))
    # A fresh process-level cache reuses the on-disk build: no recompilation.
    build._BUILT.clear()
    so = next(p for p in built[0].iterdir() if p.suffix == ".so")
    mtime = so.stat().st_mtime_ns
    load_extension("fill", FILL_CU, FILL_CPP, ["fill"], defines={"FILL_VALUE": 5})
    assert so.stat().st_mtime_ns == mtime


@pytest.mark.gpu
@needs_toolchain
def test_load_extension_compile_error(home):
    with pytest.raises(KernelFileError, match="failed to build") as info:
        load_extension("broken", FILL_CU + "\nint oops = ;\n", FILL_CPP, ["fill"], defines={"FILL_VALUE": 1})
    assert "error" in str(info.value)
