"""KernelBench problems: where they come from and how they are loaded.

Sources, in the order `auto` tries them:
- checkout: a local KernelBench checkout (`--kb-path` or $KERNELBENCH_PATH) with folders
  KernelBench/level1..level4 (or level1..level4 directly), files `<id>_<Name>.py`;
- hf: the Hugging Face dataset ScalingIntelligence/KernelBench (splits level_1..level_4), read
  from the local HF cache only (offline; the parquet files need pyarrow);
- sample: the autokernel sample problems shipped in autokernel/kb/sample. They are in the
  KernelBench format but are NOT the official KernelBench set; everything that shows results
  says so.
`official` means checkout or hf, and is an error (naming both ways) when neither is there.

A problem file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`.
Sample problems also carry `TINY = {...}`: module-level sizes for `--size tiny` (CPU tests).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Iterable, Optional

from autokernel.errors import KernelBenchError

ENV_PATH = "KERNELBENCH_PATH"
HF_DATASET = "ScalingIntelligence/KernelBench"
SAMPLE_DIR = Path(__file__).resolve().parent / "sample"
SAMPLE_LABEL = "autokernel sample problems, not the official KernelBench set"
SOURCES = ("auto", "official", "checkout", "hf", "sample")
LEVELS = (1, 2, 3, 4)
SIZES = ("default", "tiny")  # and "auto": tiny for the sample set on a machine without a GPU
_FILE = re.compile(r"^(\d+)_(.+)\.py$")


def source_label(source: str) -> str:
    return {"sample": SAMPLE_LABEL, "checkout": "official KernelBench (local checkout)",
            "hf": f"official KernelBench (HF dataset {HF_DATASET}, local cache)"}.get(source, source)


@dataclass
class Problem:
    source: str  # sample | checkout | hf | a test folder counts as checkout
    level: int
    problem_id: int
    name: str
    code: str
    path: Optional[str] = None
    size: str = "default"

    @property
    def kernel_name(self) -> str:
        """The store's kernel name and the workspace branch: kb.<source>.L<level>.<id>[.tiny]."""
        return f"kb.{self.source}.L{self.level}.{self.problem_id}" + ("" if self.size == "default" else f".{self.size}")

    def label(self) -> str:
        return f"level {self.level} problem {self.problem_id} {self.name} ({self.source})"

    @property
    def code_hash(self) -> str:
        return hashlib.sha256(self.code.encode()).hexdigest()[:16]

    def load_module(self) -> ModuleType:
        """Import the problem file (from a cached copy named by content)."""
        return load_source(self.code, f"kb_problem_{self.code_hash}")

    def to_dict(self) -> dict:
        return {"source": self.source, "level": self.level, "problem_id": self.problem_id, "name": self.name,
                "path": self.path, "size": self.size}


def load_source(code: str, name: str) -> ModuleType:
    from autokernel.config import cache_dir

    cache = cache_dir() / "kb_sources"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{name}.py"
    if not path.exists() or path.read_text() != code:
        path.write_text(code)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception:
        sys.modules.pop(name, None)
        raise
    return mod


def resolve_size(size: str | None, source: str) -> str:
    """'auto' -> 'tiny' for the sample problems when there is no GPU (the Triton interpreter would
    take hours at GPU sizes), else 'default'."""
    if size in (None, "auto"):
        if source != "sample":
            return "default"
        import torch

        return "default" if torch.cuda.is_available() else "tiny"
    if size not in SIZES:
        raise KernelBenchError(f"unknown size {size!r}; use auto, default or tiny")
    return size


def resize(code: str, size: str) -> str:
    """Rewrite the module-level sizes named in the file's TINY dict (size 'tiny')."""
    if size == "default":
        return code
    if size not in SIZES:
        raise KernelBenchError(f"unknown size {size!r}; use one of {', '.join(SIZES)}")
    tree = ast.parse(code)
    table = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and getattr(node.targets[0], "id", "") == "TINY":
            table = ast.literal_eval(node.value)
    if not table:
        return code
    for name, value in table.items():
        code = re.sub(rf"^{re.escape(name)}\s*=\s*[^\n]*$", f"{name} = {value!r}", code, count=1, flags=re.MULTILINE)
    return code


def _check_format(code: str, where: str) -> None:
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise KernelBenchError(f"{where}: syntax error at line {exc.lineno}: {exc.msg}") from exc
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    if missing:
        raise KernelBenchError(f"{where}: not a KernelBench problem (missing {', '.join(missing)})")


# -- the sources --------------------------------------------------------------------------------------

def _level_dir(root: Path, level: int) -> Optional[Path]:
    for cand in (root / "KernelBench" / f"level{level}", root / f"level{level}"):
        if cand.is_dir():
            return cand
    return None


def checkout_root(kb_path: str | os.PathLike | None) -> Optional[Path]:
    raw = kb_path or os.environ.get(ENV_PATH)
    if not raw:
        return None
    root = Path(raw).expanduser().resolve()
    if not root.is_dir():
        raise KernelBenchError(f"KernelBench path {root} is not a directory",
                               hint=f"--kb-path or ${ENV_PATH} must name a KernelBench checkout")
    if not any(_level_dir(root, lv) for lv in LEVELS):
        raise KernelBenchError(f"{root} has no level1..level4 folders (nor KernelBench/level1..level4)")
    return root


def _from_folder(root: Path, source: str, levels: Iterable[int]) -> list[Problem]:
    out = []
    for lv in levels:
        d = _level_dir(root, lv)
        if d is None:
            continue
        for f in d.iterdir():
            m = _FILE.match(f.name)
            if not m or not f.is_file():
                continue
            out.append(Problem(source=source, level=lv, problem_id=int(m.group(1)), name=m.group(2),
                               code=f.read_text(), path=str(f)))
    return out


def hf_snapshot() -> Optional[Path]:
    """The dataset's folder in the local HF cache, or None (never downloads)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    # The cache folder is read now, not at huggingface_hub's import, so HF_HUB_CACHE / HF_HOME set
    # by a caller (or a test) after that import still count.
    cache = os.environ.get("HF_HUB_CACHE") or (os.path.join(os.environ["HF_HOME"], "hub")
                                                if os.environ.get("HF_HOME") else None)
    try:
        return Path(snapshot_download(HF_DATASET, repo_type="dataset", local_files_only=True, cache_dir=cache))
    except Exception:
        return None


def _from_hf(snap: Path, levels: Iterable[int]) -> list[Problem]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise KernelBenchError(f"the KernelBench dataset is in the HF cache ({snap}) but reading its parquet "
                               "files needs pyarrow, which is not installed",
                               hint="pip install pyarrow, or use a checkout with --kb-path") from exc
    out = []
    for lv in levels:
        files = sorted(snap.rglob(f"level_{lv}-*.parquet")) + sorted(snap.rglob(f"level_{lv}/*.parquet"))
        for f in files:
            for row in pq.read_table(f).to_pylist():
                name = str(row.get("name") or f"problem_{row.get('problem_id')}")
                m = _FILE.match(name if name.endswith(".py") else name + ".py")
                out.append(Problem(source="hf", level=int(row.get("level") or lv),
                                   problem_id=int(row.get("problem_id") or (m.group(1) if m else 0)),
                                   name=m.group(2) if m else name, code=row["code"], path=str(f)))
    return out


def resolve_source(source: str | None, kb_path=None) -> str:
    """The concrete source (checkout | hf | sample) that `source` means here."""
    source = source or "auto"
    if source not in SOURCES:
        raise KernelBenchError(f"unknown source {source!r}; use one of {', '.join(SOURCES)}")
    if source in ("checkout", "hf", "sample"):
        return source
    if checkout_root(kb_path) is not None:
        return "checkout"
    if hf_snapshot() is not None:
        return "hf"
    if source == "official":
        raise KernelBenchError(
            "no KernelBench problems found: neither a local checkout nor the HF dataset is available",
            hint=f"clone https://github.com/ScalingIntelligence/KernelBench and pass --kb-path DIR (or set "
                 f"${ENV_PATH}), or have the dataset {HF_DATASET} in the local Hugging Face cache; "
                 f"--source sample uses the {SAMPLE_LABEL}")
    return "sample"


def load_problems(source: str | None = None, kb_path=None, level: int | None = None,
                  ids: Iterable[int] | None = None, size: str = "default") -> list[Problem]:
    levels = [level] if level else list(LEVELS)
    for lv in levels:
        if lv not in LEVELS:
            raise KernelBenchError(f"level {lv} does not exist; KernelBench has levels 1-4")
    concrete = resolve_source(source, kb_path)
    if concrete == "checkout":
        root = checkout_root(kb_path)
        if root is None:
            raise KernelBenchError("--source checkout needs a KernelBench checkout",
                                   hint=f"pass --kb-path DIR or set ${ENV_PATH}; or have the HF dataset "
                                        f"{HF_DATASET} in the local cache (--source hf)")
        probs = _from_folder(root, "checkout", levels)
    elif concrete == "hf":
        snap = hf_snapshot()
        if snap is None:
            raise KernelBenchError(f"the HF dataset {HF_DATASET} is not in the local Hugging Face cache",
                                   hint=f"download it where there is network, or use a checkout: --kb-path DIR "
                                        f"or ${ENV_PATH}")
        probs = _from_hf(snap, levels)
    else:
        probs = _from_folder(SAMPLE_DIR, "sample", levels)
    if ids:
        wanted = set(int(i) for i in ids)
        missing = wanted - {p.problem_id for p in probs}
        if missing:
            raise KernelBenchError(f"problem(s) {', '.join(map(str, sorted(missing)))} not found in "
                                   f"{source_label(concrete)}" + (f" level {level}" if level else ""))
        probs = [p for p in probs if p.problem_id in wanted]
    for p in probs:
        _check_format(p.code, p.path or p.label())
        if size != "default":
            p.code = resize(p.code, size)
            p.size = size
    probs.sort(key=lambda p: (p.level, p.problem_id))
    return probs
