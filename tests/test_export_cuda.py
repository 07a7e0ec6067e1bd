"""Export of CUDA kernel files to kernel-builder's layout: sources, torch-ext binding, build.toml and the
card everywhere; on a CUDA machine the built arch variant, loaded back with the real `kernels` library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
import torch

from autokernel.cuda import build
from autokernel.errors import ExportError
from autokernel.export import export_kernel, provenance_from_file
from autokernel.export.cuda import extension_args, standalone_source
from autokernel.export.layout import arch_variant_name
from autokernel.kernels import get_spec, starter_path

HAS_CUDA = torch.cuda.is_available()


def _export(tmp_path: Path, kernel_type: str, build_cuda: bool | None = None, source: str | None = None):
    src, prov = provenance_from_file(starter_path(kernel_type, "cuda"))
    name = "ak-" + kernel_type.replace("_", "-")
    return export_kernel(source or src, prov, f"autokernel-test/{name}", tmp_path / name, build_cuda=build_cuda)


def test_cuda_export_writes_kernel_builder_layout(tmp_path):
    result = _export(tmp_path, "rmsnorm", build_cuda=False)
    out, py = result.out_dir, "ak_rmsnorm"
    assert result.variants == [] and not (out / "build").exists()  # sources only when not built
    assert result.note.startswith("no built variant (") and "kernel-builder" in result.note
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert files == {"build.toml", "README.md", f"{py}_cuda/kernel.cu", "torch-ext/torch_binding.cpp",
                     "torch-ext/torch_binding.h", f"torch-ext/{py}/__init__.py", f"torch-ext/{py}/_kernel.py",
                     f"torch-ext/{py}/_build.py"}
    config = tomllib.loads((out / "build.toml").read_text())
    assert config["general"]["name"] == "ak-rmsnorm" and config["general"]["backends"] == ["cuda"]
    assert config["kernel"][py]["src"] == [f"{py}_cuda/kernel.cu"] and config["kernel"][py]["backend"] == "cuda"
    assert set(config["torch"]["src"]) == {"torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"}

    starter = starter_path("rmsnorm", "cuda").read_text()
    cu = (out / f"{py}_cuda" / "kernel.cu").read_text()
    assert "torch" not in cu and "rmsnorm_launch" in cu
    assert cu.index("#define BLOCK_SIZE 256") < cu.index("#ifndef BLOCK_SIZE")  # tunables fixed first
    binding = (out / "torch-ext" / "torch_binding.cpp").read_text()
    assert "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops)" in binding and "REGISTER_EXTENSION" in binding
    assert 'ops.def("rmsnorm_fwd", torch::dispatch(torch::kCUDA, &rmsnorm_fwd));' in binding
    assert "torch::Tensor rmsnorm_fwd(torch::Tensor x, torch::Tensor weight, double eps, int64_t dtype, " \
           "int64_t stream);" in (out / "torch-ext" / "torch_binding.h").read_text()
    kernel_py = (out / "torch-ext" / py / "_kernel.py").read_text()
    assert "autokernel" not in kernel_py and "from ._build import dtype_code, load_extension" in kernel_py
    assert kernel_py.replace("from ._build import", "from autokernel.cuda.build import") == starter

    card = (out / "README.md").read_text()
    assert "library_name: kernels" in card and "# ak-rmsnorm" in card and "- cuda" in card
    assert "CUDA kernel was found by" in card and "get_kernel(\"autokernel-test/ak-rmsnorm\"" in card
    assert "def reference" in card or "rms" in card.lower()


def test_exported_package_imports_without_autokernel_and_explains_missing_build(tmp_path):
    out = _export(tmp_path, "softmax", build_cuda=False).out_dir
    code = ("import sys; sys.modules['autokernel'] = None\n"
            "import ak_softmax, torch\n"
            "assert ak_softmax.softmax is ak_softmax.kernel_fn\n"
            "try:\n    ak_softmax.softmax(torch.randn(2, 8))\nexcept RuntimeError as e:\n    print('ERR', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=out / "torch-ext", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "ERR no compiled extension" in proc.stdout and "kernel-builder" in proc.stdout


def test_shim_refuses_an_extension_it_was_not_built_from(tmp_path):
    out = _export(tmp_path, "rmsnorm", build_cuda=False).out_dir
    sys.path.insert(0, str(out / "torch-ext"))
    try:
        from ak_rmsnorm import _build, _kernel
        with pytest.raises(RuntimeError, match="other than the one built"):
            _build.load_extension("rmsnorm", _kernel.CUDA_SRC, _kernel.CPP_SRC, _kernel.FUNCTIONS,
                                  defines=dict(_kernel.DEFINES, BLOCK_SIZE=512))
        with pytest.raises(RuntimeError, match="other than the one built"):
            _build.load_extension("rmsnorm", _kernel.CUDA_SRC + " ", _kernel.CPP_SRC, _kernel.FUNCTIONS,
                                  defines=_kernel.DEFINES)
        assert _build.dtype_code(torch.bfloat16) == 2
    finally:
        sys.path.remove(str(out / "torch-ext"))
        for m in [m for m in sys.modules if m == "ak_rmsnorm" or m.startswith("ak_rmsnorm.")]:
            del sys.modules[m]


@pytest.mark.parametrize("kernel_type", ["matmul", "fused_mlp", "flash_attention", "cross_entropy", "layernorm",
                                         "reduce", "rotary_embedding"])
def test_every_cuda_starter_exports(tmp_path, kernel_type):
    args = extension_args(starter_path(kernel_type, "cuda").read_text())
    assert args["name"] == kernel_type and args["functions"] and args["defines"]
    out = _export(tmp_path, kernel_type, build_cuda=False).out_dir
    assert (out / "torch-ext" / "torch_binding.h").read_text().count(";") == len(args["functions"])


def test_searched_tunables_reach_the_exported_sources(tmp_path):
    from autokernel.kernelfile import with_config

    source = with_config(starter_path("rmsnorm", "cuda").read_text(), {"BLOCK_SIZE": 512, "VEC_BYTES": 8})
    assert extension_args(source)["defines"] == {"BLOCK_SIZE": "512", "VEC_BYTES": "8", "SMEM_BYTES": "49152"}
    out = _export(tmp_path, "rmsnorm", build_cuda=False, source=source).out_dir
    cu = (out / "ak_rmsnorm_cuda" / "kernel.cu").read_text()
    assert "#define BLOCK_SIZE 512" in cu and "#define VEC_BYTES 8" in cu


def test_unexportable_cuda_files_are_refused(tmp_path):
    base = starter_path("rmsnorm", "cuda").read_text()
    with pytest.raises(ExportError, match="imports autokernel"):
        standalone_source(base + "\nfrom autokernel.verify import verify\n")
    dynamic = base.replace('load_extension("rmsnorm", CUDA_SRC', 'load_extension("rmsnorm", CUDA_SRC.upper()')
    with pytest.raises(ExportError, match="statically"):
        extension_args(dynamic)
    if not (torch.version.cuda and build.nvcc_available()):
        with pytest.raises(ExportError, match="cannot build"):
            _export(tmp_path, "rmsnorm", build_cuda=True)


@pytest.mark.slow  # nvcc plus a C++ syntax check against torch headers: about a minute on 2 cores
@pytest.mark.skipif(not build.nvcc_available(), reason="nvcc is not installed")
def test_exported_sources_compile(tmp_path):
    from torch.utils import cpp_extension

    out = _export(tmp_path, "rmsnorm", build_cuda=False).out_dir
    incs = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"], build._cuda_include(),
            str(out / "torch-ext")]
    jobs = [[os.environ.get("CXX", "c++"), "-fsyntax-only", "-std=c++17", "-w", "-DTORCH_EXTENSION_NAME=_ak_check",
             *[f"-I{i}" for i in incs], str(out / "torch-ext" / "torch_binding.cpp")],
            [build._nvcc(), "-c", "-std=c++17", "-O1", "-arch=sm_90", *cpp_extension.COMMON_NVCC_FLAGS,
             str(out / "ak_rmsnorm_cuda" / "kernel.cu"), "-o", str(tmp_path / "kernel.o")]]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for cmd in jobs]
    for proc in procs:
        output, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, output[-4000:]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_type", ["rmsnorm", "softmax"])
def test_cuda_export_builds_and_loads_with_kernels(tmp_path, kernel_type):
    kernels = pytest.importorskip("kernels")
    from kernels._rust import Digest, DigestAlgorithm, Metadata

    result = _export(tmp_path, kernel_type)
    out, variant, py = result.out_dir, arch_variant_name(), "ak_" + kernel_type
    assert result.variants == [variant] and result.note is None
    vdir = out / "build" / variant
    meta = Metadata.read_from_file(vdir / "metadata.json")
    major, minor = torch.cuda.get_device_capability()
    assert meta.backend.archs == [f"{major}.{minor}"] and meta.name.python_name == py
    meta.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, vdir))
    assert list(vdir.glob("_ak_*.so")) and "autokernel" not in (vdir / "_kernel.py").read_text()
    assert f"build/{variant}" in (out / "README.md").read_text()

    spec = get_spec(kernel_type)
    gen = torch.Generator(device="cuda").manual_seed(0)
    k = kernels.get_local_kernel(out)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        args = spec.make_inputs(spec.default_shapes[0], dtype, "cuda", gen, "normal")
        got = getattr(k, kernel_type)(*args)
        atol, rtol = spec.tolerance(dtype)
        torch.testing.assert_close(got.float(), spec.reference(*args).float(), atol=atol, rtol=rtol)

    # The same export, in a process where autokernel cannot be imported at all.
    inputs = spec.make_inputs(spec.small_shapes[-1], torch.float16, "cuda", gen, "normal")
    torch.save([a.cpu() if torch.is_tensor(a) else a for a in inputs], tmp_path / "in.pt")
    code = (f"import sys, torch; sys.modules['autokernel'] = None\nimport kernels\n"
            f"k = kernels.get_local_kernel(__import__('pathlib').Path({str(out)!r}))\n"
            f"args = [a.cuda() if torch.is_tensor(a) else a for a in torch.load({str(tmp_path / 'in.pt')!r})]\n"
            f"torch.save(k.{kernel_type}(*args).cpu(), {str(tmp_path / 'out.pt')!r})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    atol, rtol = spec.tolerance(torch.float16)
    torch.testing.assert_close(torch.load(tmp_path / "out.pt").float(), spec.reference(*inputs).float().cpu(),
                               atol=atol, rtol=rtol)
    assert json.loads((vdir / "metadata.json").read_text())["backend"]["type"] == "cuda"
