"""Write a kernel into the layout the Hugging Face `kernels` library loads.

    <out>/build.toml                       kernel-builder configuration
    <out>/README.md                        the card (written by card.py)
    <out>/torch-ext/<pyname>/...           the Python package (and the op binding for CUDA)
    <out>/<pyname>_cuda/kernel.cu          CUDA sources (CUDA kernels only)
    <out>/build/<variant>/...              loadable build variants, each with metadata.json

Triton kernels are pure Python, so they ship as no-arch variants: `torch-cuda` (what kernel-builder
writes today for a Triton kernel on CUDA) and `torch-universal` (older loaders, and the CPU where the
Triton interpreter runs). CUDA kernels carry their sources; where this machine can build them, the
built arch variant for this torch/CUDA/C++-ABI combination is added.
"""

from __future__ import annotations

import base64
import hashlib
import json
import platform
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from autokernel.errors import ExportError

NAME_RE = re.compile(r"^[a-z][a-z0-9-]*[a-z0-9]$")
LICENSE = "Apache-2.0"
NOARCH_VARIANTS = ("torch-cuda", "torch-universal")


@dataclass
class ExportPlan:
    name: str  # hub kernel name: lowercase letters, digits, dashes
    repo_id: str
    kernel_type: str
    backend: str  # triton | cuda
    source: str  # the kernel file
    version: int = 1
    ops_suffix: str = ""  # unique material for the op namespace / module id
    variants: list[str] = field(default_factory=list)

    @property
    def python_name(self) -> str:
        return self.name.replace("-", "_")

    @property
    def module_id(self) -> str:
        return f"_{self.python_name}_{self.ops_suffix}"


def kernel_name_from_repo(repo_id: str) -> str:
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ExportError(f"--repo-id must look like ORG/NAME, got {repo_id!r}")
    name = repo_id.split("/")[1].lower().replace("_", "-")
    if not NAME_RE.match(name):
        raise ExportError(f"kernel name {name!r} (from {repo_id!r}) must be lowercase letters, digits and dashes, "
                          "starting with a letter")
    return name


def digest_files(variant_dir: Path) -> dict[str, str]:
    """sha256, base64, of every file but metadata.json and bytecode: what kernels' Digest checks."""
    files = {}
    for p in sorted(variant_dir.rglob("*")):
        if not p.is_file() or p.name == "metadata.json" or "__pycache__" in p.parts or p.suffix == ".pyc":
            continue
        files[p.relative_to(variant_dir).as_posix()] = base64.b64encode(hashlib.sha256(p.read_bytes()).digest()).decode()
    return files


def write_metadata(plan: ExportPlan, variant_dir: Path, backend: dict) -> None:
    meta = {
        "name": plan.name,
        "id": plan.module_id,
        "version": plan.version,
        "license": LICENSE,
        "python-depends": [],
        "backend": backend,
        "digest": {"algorithm": "sha256", "files": digest_files(variant_dir)},
    }
    (variant_dir / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")


def _entry_alias(plan: ExportPlan) -> str:
    return plan.kernel_type  # e.g. kernel.rmsnorm(x, weight, eps)


def package_init(plan: ExportPlan) -> str:
    alias = _entry_alias(plan)
    return (
        f'"""{plan.name}: the {plan.kernel_type} kernel found by AutoKernel ({plan.backend}).\n\n'
        f'Call `{alias}(...)` with the same arguments as the PyTorch reference (see README.md)."""\n\n'
        "from ._kernel import kernel_fn\n\n"
        f"{alias} = kernel_fn\n\n"
        f'__all__ = ["kernel_fn", "{alias}"]\n'
    )


def write_python_package(plan: ExportPlan, pkg_dir: Path, kernel_source: str, extra_files: dict[str, str]) -> None:
    pkg_dir.mkdir(parents=True, exist_ok=True)
    (pkg_dir / "__init__.py").write_text(package_init(plan))
    (pkg_dir / "_kernel.py").write_text(kernel_source)
    for rel, text in extra_files.items():
        (pkg_dir / rel).write_text(text)


def write_variant(plan: ExportPlan, out: Path, variant: str, kernel_source: str, backend_meta: dict,
                  extra_files: dict[str, str] | None = None, binaries: list[Path] | None = None) -> Path:
    vdir = out / "build" / variant
    if vdir.exists():
        shutil.rmtree(vdir)
    write_python_package(plan, vdir, kernel_source, extra_files or {})
    for b in binaries or []:
        shutil.copy2(b, vdir / b.name)
    # Older `kernels` versions import build/<variant>/<pyname>/__init__.py: give them the same package.
    write_python_package(plan, vdir / plan.python_name, kernel_source, extra_files or {})
    for b in binaries or []:
        shutil.copy2(b, vdir / plan.python_name / b.name)
    write_metadata(plan, vdir, backend_meta)
    plan.variants.append(variant)
    return vdir


def build_toml(plan: ExportPlan, cuda_files: list[str] | None = None) -> str:
    lines = [
        "[general]",
        f'name = "{plan.name}"',
        f"version = {plan.version}",
        f'license = "{LICENSE}"',
        'backends = ["cuda"]',
        "",
        "[general.hub]",
        f'repo-id = "{plan.repo_id}"',
        "",
    ]
    if cuda_files:
        lines += [
            "[torch]",
            'src = ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"]',
            "",
            f"[kernel.{plan.python_name}]",
            'backend = "cuda"',
            'depends = ["torch"]',
            "src = [" + ", ".join(f'"{f}"' for f in cuda_files) + "]",
            'cuda-capabilities = ["9.0"]',
            "",
        ]
    return "\n".join(lines)


def arch_variant_name() -> str:
    """The arch variant string for this machine's torch build, as kernels' loader parses it."""
    import torch

    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if torch.version.cuda is None:
        raise ExportError("this torch build has no CUDA, so no CUDA variant can be built here")
    cu = "cu" + "".join(torch.version.cuda.split(".")[:2])
    abi = "cxx11" if torch.compiled_with_cxx11_abi() else "cxx98"
    return f"torch{major}{minor}-{abi}-{cu}-{platform.machine()}-{platform.system().lower()}"
