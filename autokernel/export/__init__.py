"""Export a kernel AutoKernel found to the Hugging Face kernels-hub layout, and push it.

The source is the best kept experiment of a kernel in the store (or a given commit / experiment),
or any kernel file on disk.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from autokernel.errors import ExportError, NotFoundError
from autokernel.export.card import Provenance, reference_source, render_card
from autokernel.export.layout import (
    NOARCH_VARIANTS,
    ExportPlan,
    build_toml,
    kernel_name_from_repo,
    write_python_package,
    write_variant,
)
from autokernel.kernelfile import parse_source

LAUNCHER = "autokernel.kernels.launcher"  # the lean launch path the starters import


@dataclass
class ExportResult:
    out_dir: Path
    name: str
    variants: list[str]
    provenance: Provenance
    note: str | None = None  # what the export lacks and why (a CUDA kernel this machine cannot build)


def provenance_from_store(store, workspace, kernel: str, *, commit: str | None = None,
                          experiment: int | None = None) -> tuple[str, Provenance]:
    """The kernel file to export and what the store knows about it."""
    k = store.resolve_kernel(kernel)
    exp = None
    if experiment is not None:
        matches = [e for e in store.list_experiments(kernel_id=k.id) if e.number == experiment or e.id == experiment]
        if not matches:
            raise NotFoundError(f"kernel {kernel!r} has no experiment {experiment}")
        exp = matches[-1]
        commit = exp.commit
    elif commit is None:
        exp = store.best_experiment(k.id)
        commit = exp.commit if exp is not None else None
    else:
        exp = next((e for e in store.list_experiments(kernel_id=k.id) if e.commit and e.commit.startswith(commit)), None)
    try:
        source = workspace.read(k.name, commit) if commit else workspace.read(k.name)
    except Exception as exc:
        raise ExportError(f"cannot read kernel {k.name!r} at {commit or 'its branch head'}: {exc}") from exc
    shapes = json.loads(k.shapes_json or "[]")
    if isinstance(shapes, dict):
        shapes = shapes.get("shapes", [])
    prov = Provenance(kernel_name=k.name, kernel_type=k.kernel_type, backend=k.backend, commit=commit,
                      dtype=k.dtype, shapes=shapes)
    if exp is not None:
        prov.experiment, prov.run = exp.number, exp.run_id
        prov.date = (exp.finished_at or exp.created_at).strftime("%Y-%m-%d") if (exp.finished_at or exp.created_at) else None
        prov.device, prov.latency_us, prov.eager_us, prov.compile_us = exp.device, exp.latency_us, exp.eager_us, exp.compile_us
        prov.speedup_vs_eager, prov.speedup_vs_compile = exp.speedup_vs_eager, exp.speedup_vs_compile
        prov.correctness = exp.correctness
        prov.stages = {s: getattr(exp, f"stage_{s}") for s in ("smoke", "shapes", "stability", "determinism", "edge")}
    return source, prov


def provenance_from_file(path: Path) -> tuple[str, Provenance]:
    try:
        source = Path(path).read_text()
    except OSError as exc:
        raise ExportError(f"cannot read {path}: {exc.strerror}") from exc
    kf = parse_source(source, Path(path))
    return source, Provenance(kernel_name=str(path), kernel_type=kf.kernel_type, backend=kf.backend)


def export_kernel(source: str, prov: Provenance, repo_id: str, out_dir: Path, *, version: int = 1,
                  build_cuda: bool | None = None) -> ExportResult:
    """Write the export into `out_dir` (replacing an earlier export there)."""
    import autokernel.kernels.launcher  # noqa: F401  (its file is shipped with Triton kernels)
    from autokernel.kernels import get_spec

    kf = parse_source(source)
    name = kernel_name_from_repo(repo_id)
    suffix = hashlib.sha256(source.encode()).hexdigest()[:7]
    plan = ExportPlan(name=name, repo_id=repo_id, kernel_type=kf.kernel_type, backend=kf.backend,
                      source=source, version=version, ops_suffix=suffix)
    out = Path(out_dir)
    if out.exists():
        if not (out / "build.toml").exists() and any(out.iterdir()):
            raise ExportError(f"{out} exists and is not an earlier export; choose an empty --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    note = None
    if kf.backend == "triton":
        # the lean launch path ships inside the package, as its own module
        source = re.sub(rf"from {re.escape(LAUNCHER)} import ", "from ._launcher import ", source)
        extra = {"_launcher.py": Path(sys.modules[LAUNCHER].__file__).read_text()} if "._launcher" in source else {}
        if re.search(r"^\s*(from|import)\s+autokernel\b", source, re.MULTILINE):
            raise ExportError("the kernel file imports autokernel; an exported Triton kernel must stand alone")
        (out / "build.toml").write_text(build_toml(plan))
        write_python_package(plan, out / "torch-ext" / plan.python_name, source, extra)
        for variant in NOARCH_VARIANTS:
            write_variant(plan, out, variant, source, {"type": "cuda"}, extra_files=extra)
    else:
        from autokernel.export.cuda import export_cuda

        note = export_cuda(plan, out, source, build=build_cuda)
    spec = get_spec(kf.kernel_type)
    description = f"{spec.description} ({kf.kernel_type}, {kf.backend})."
    (out / "README.md").write_text(render_card(plan, prov, reference_source(spec), description))
    return ExportResult(out_dir=out, name=name, variants=list(plan.variants), provenance=prov, note=note)
