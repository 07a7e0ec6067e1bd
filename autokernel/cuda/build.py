"""Build CUDA C++ kernels into Python modules, and prove in CI (nvcc, no GPU) that they compile.

The convention every CUDA kernel file follows (the CPU torch wheel has no usable CUDA headers:
c10/cuda includes a cmake-generated header it does not ship, and torch headers through nvcc take
minutes, so the two halves are kept apart):

* CUDA_SRC is plain CUDA C++ that includes no torch header: the __global__ kernels plus a
  C-style launcher taking raw pointers, sizes, strides, a dtype code and a cudaStream_t, returning
  cudaError_t. It compiles with plain nvcc in seconds. Dtype codes: DTYPE_F32 = 0, DTYPE_F16 = 1,
  DTYPE_BF16 = 2 (see `dtype_code`); the launcher dispatches to templates.
* CPP_SRC is host C++ against <torch/extension.h> only (no c10/cuda, no ATen/cuda): it declares
  the launcher (cudaStream_t comes from <cuda_runtime.h>, which the build adds), checks the
  tensors, allocates the output and calls the launcher. The stream arrives as an int64 argument
  (kernel_fn passes torch.cuda.current_stream().cuda_stream), which keeps c10/cuda out.
* `functions` names the CPP_SRC functions exported to Python (bound with pybind11 here).
* Tunables are module-level literals of the kernel file passed as `defines` (-D NAME=value to
  both compilers), so changing BLOCK_SIZE rebuilds under a new hash and never edits the source.

Builds are cached twice: in the process (dict) and on disk under <home>/cache/cuda/<hash> (config.cache_dir()), the
hash covering sources, flags, defines, torch and CUDA versions and the target arch, so an
unchanged kernel is never recompiled. No --use_fast_math by default: correctness first; a kernel
may opt in through extra_cuda_cflags.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Iterable, Mapping

from autokernel.errors import KernelFileError
from autokernel.textfmt import tail

DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2
_BUILT: dict[str, ModuleType] = {}
_LOCK = threading.Lock()


def dtype_code(dtype) -> int:
    """The launcher's dtype code of a torch dtype; anything else is a KernelFileError."""
    import torch

    codes = {torch.float32: DTYPE_F32, torch.float16: DTYPE_F16, torch.bfloat16: DTYPE_BF16}
    if dtype not in codes:
        raise KernelFileError(f"CUDA kernels here support float32/float16/bfloat16, not {dtype}")
    return codes[dtype]


def _define_flags(defines: Mapping[str, int | str] | None) -> list[str]:
    flags = []
    for k, v in sorted((defines or {}).items()):
        if not k.isidentifier():
            raise KernelFileError(f"define name {k!r} is not an identifier")
        if isinstance(v, bool):
            v = int(v)
        flags.append(f"-D{k}={v}")
    return flags


def arch_flags(sm90a: bool = False) -> list[str]:
    """sm_90 on Hopper (sm_90a when asked: wgmma/TMA need it), else the current device's own arch,
    else sm_90 (the target, used when nothing is attached, e.g. compile checks in CI)."""
    major, minor = 9, 0
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
    except Exception:
        pass
    if (major, minor) == (9, 0) and sm90a:
        return ["-gencode=arch=compute_90a,code=sm_90a"]
    return [f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"]


def render_cpp(cpp_src: str, functions: Iterable[str]) -> str:
    """The host translation unit exactly as it is built: torch + cuda_runtime, the kernel's C++,
    and the pybind11 bindings of `functions`."""
    binds = "\n".join(f'  m.def("{f}", &{f}, "{f}");' for f in functions)
    return ("#include <torch/extension.h>\n#include <cuda_runtime.h>\n\n" + cpp_src +
            "\n\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n" + binds + "\n}\n")


def render_cu(cuda_src: str) -> str:
    return "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <stdint.h>\n\n" + cuda_src


def build_hash(name: str, cuda_src: str, cpp_src: str, functions: Iterable[str], flags: Iterable[str]) -> str:
    import torch

    h = hashlib.sha256()
    for part in (name, cuda_src, cpp_src, ",".join(functions), " ".join(flags), torch.__version__,
                 str(torch.version.cuda), sys.version.split()[0]):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def build_dir_for(key: str) -> Path:
    """The on-disk build folder of a build hash: <cache>/cuda/<key>, the cache config.cache_dir()
    answers at build time (an applied model's home, the CLI's --home, ...)."""
    from autokernel.config import cache_dir

    return cache_dir() / "cuda" / key


def load_extension(name: str, cuda_src: str, cpp_src: str, functions: list[str],
                   extra_cuda_cflags: Iterable[str] = (), defines: Mapping[str, int | str] | None = None,
                   sm90a: bool = False) -> ModuleType:
    """Compile (or reuse) the extension and return the imported module. Needs CUDA and ninja."""
    from torch.utils import cpp_extension

    dflags = _define_flags(defines)
    cuda_flags = ["-O3", "-lineinfo", *arch_flags(sm90a), *dflags, *extra_cuda_cflags]
    cxx_flags = ["-O3", *dflags]  # torch adds its own -std and ABI flags to both
    key = build_hash(name, cuda_src, cpp_src, functions, cuda_flags + ["|"] + cxx_flags)
    with _LOCK:
        if key in _BUILT:
            return _BUILT[key]
        missing = toolchain_missing()
        if missing:
            raise KernelFileError(f"cannot build CUDA kernel {name}: {missing}")
        build_dir = build_dir_for(key)
        build_dir.mkdir(parents=True, exist_ok=True)
        cpp_path, cu_path = build_dir / "main.cpp", build_dir / "kernel.cu"
        for path, text in ((cpp_path, render_cpp(cpp_src, functions)), (cu_path, render_cu(cuda_src))):
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
        # The module name carries the hash: Python caches extensions by name within a process.
        mod_name = f"ak_{''.join(c if c.isalnum() else '_' for c in name)}_{key}"
        try:
            mod = cpp_extension.load(name=mod_name, sources=[str(cpp_path), str(cu_path)],
                                     extra_cflags=cxx_flags, extra_cuda_cflags=cuda_flags,
                                     build_directory=str(build_dir), verbose=False)
        except Exception as exc:  # RuntimeError carries ninja's output; ImportError a bad link
            raise KernelFileError(f"CUDA kernel {name} failed to build:\n{tail(str(exc).strip())}") from exc
        _BUILT[key] = mod
        return mod


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    cand = Path(home) / "bin" / "nvcc"
    return str(cand) if cand.exists() else None


def nvcc_available() -> bool:
    return _nvcc() is not None


def ensure_ninja() -> bool:
    """torch's JIT build runs `ninja` from PATH; the pip `ninja` package (e.g. installed with
    --target, whose bin/ is not on PATH) is put there when the command is missing."""
    if shutil.which("ninja"):
        return True
    try:
        import ninja  # type: ignore[import-not-found]
    except ImportError:
        return False
    bin_dir = getattr(ninja, "BIN_DIR", None)
    if bin_dir and (Path(bin_dir) / "ninja").exists():
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        return True
    return False


def toolchain_missing() -> str | None:
    """Why load_extension cannot build here (no CUDA device, nvcc or ninja), or None."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    if not nvcc_available():
        return "nvcc not found (set CUDA_HOME)"
    if not ensure_ninja():
        return "ninja not found (pip install ninja)"
    return None


def _cuda_include() -> str:
    """cuda_runtime.h's folder: $CUDA_HOME, nvcc's install (nvcc may be a wrapper script on PATH),
    then the usual place."""
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = _nvcc()
    if nvcc:
        homes.append(str(Path(nvcc).resolve().parent.parent))
    homes.append("/usr/local/cuda")
    for home in homes:
        if home and (Path(home) / "include" / "cuda_runtime.h").exists():
            return str(Path(home) / "include")
    return "/usr/local/cuda/include"


def compile_check(cuda_src: str, cpp_src: str | None = None, extra_cuda_cflags: Iterable[str] = (),
                  defines: Mapping[str, int | str] | None = None, functions: Iterable[str] = (),
                  timeout_s: float = 600.0) -> None:
    """Prove the sources compile without a GPU: the .cu through nvcc to an sm_90 object, and, when
    cpp_src is given, the host unit (with its pybind11 bindings) through the host compiler's
    syntax check against torch's headers. Both run at once. Raises KernelFileError with the
    compiler's output tail on failure."""
    from torch.utils import cpp_extension

    nvcc = _nvcc()
    if nvcc is None:
        raise KernelFileError("nvcc not found (set CUDA_HOME); cannot compile-check CUDA sources")
    dflags = _define_flags(defines)
    with tempfile.TemporaryDirectory(prefix="ak_cuda_check_") as tmp:
        cu = Path(tmp) / "kernel.cu"
        cu.write_text(render_cu(cuda_src))
        # torch's own nvcc flags (no implicit half/bf16 conversions...) so CI sees what the build sees.
        common = list(getattr(cpp_extension, "COMMON_NVCC_FLAGS", []))
        jobs = [("nvcc", [nvcc, "-c", "-std=c++17", "-O1", "-arch=sm_90", *common, *dflags, *extra_cuda_cflags,
                          str(cu), "-o", str(Path(tmp) / "kernel.o")])]
        if cpp_src is not None:
            cpp = Path(tmp) / "main.cpp"
            cpp.write_text(render_cpp(cpp_src, functions))
            incs = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"], _cuda_include()]
            cxx = os.environ.get("CXX", "c++")
            jobs.append(("c++", [cxx, "-fsyntax-only", "-std=c++17", "-w", "-DTORCH_EXTENSION_NAME=ak_check",
                                 *dflags, *[f"-I{i}" for i in incs], str(cpp)]))
        procs = []
        for label, cmd in jobs:
            try:
                procs.append((label, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                      text=True)))
            except OSError as exc:
                raise KernelFileError(f"cannot run {cmd[0]}: {exc.strerror}") from exc
        failures = []
        for label, proc in procs:
            try:
                out, _ = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
                failures.append(f"{label} timed out after {timeout_s:.0f}s")
                continue
            if proc.returncode != 0:
                failures.append(f"{label} failed (exit {proc.returncode}):\n{tail(out.strip())}")
        if failures:
            raise KernelFileError("CUDA sources do not compile:\n" + "\n".join(failures))
