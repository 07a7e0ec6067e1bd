"""The single-file kernel format: what a kernel.py holds, how it is loaded and how its tunables change.

A kernel file is plain Python:

    KERNEL_TYPE = "softmax"            # one of the registered kernel types
    BACKEND = "triton"                 # triton | cuda
    BLOCK_SIZE = 1024                  # tunables: module-level literals, one per line
    NUM_WARPS = 8
    SEARCH_SPACE = {"BLOCK_SIZE": [512, 1024, 2048], "NUM_WARPS": [4, 8, 16]}
    STRUCTURAL = ["SCHEDULE"]          # optional: the tunables that switch code paths, not sizes
    def valid_config(cfg): ...         # optional: rejects combinations that cannot work
    def effective_config(cfg, dtype):  # optional: the tunables that matter for a dtype (autokernel.declared)
    DETERMINISTIC = True               # optional; False needs NONDETERMINISM_REASON = "..."
    def kernel_fn(*args): ...          # same signature and result as the spec's reference

Only this file changes between experiments; inputs, reference and bench live elsewhere.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import importlib.util
import itertools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from autokernel import pyast
from autokernel.errors import KernelFileError

ENTRY = "kernel_fn"
MAX_SOURCE_BYTES = 200_000


@dataclass
class KernelFile:
    path: Path | None
    source: str
    kernel_type: str
    backend: str
    search_space: dict[str, list[Any]]
    config: dict[str, Any]  # current values of the tunables named in the search space
    deterministic: bool = True
    nondeterminism_reason: str = ""  # required when deterministic is False
    structural: tuple[str, ...] = ()  # the tunables that switch code paths (persistent, TMA, split-K...)

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]


def _literal_assignments(tree: ast.Module) -> dict[str, Any]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


@functools.lru_cache(maxsize=64)
def _module_facts(source: str) -> tuple[dict[str, Any], bool]:
    """(the module-level literal assignments, whether it defines ENTRY); raises SyntaxError. Cached:
    the search parses the same best's source at every proposal (~25 ms each on a 2-core CPU)."""
    tree = pyast.parse(source)
    return _literal_assignments(tree), any(isinstance(n, ast.FunctionDef) and n.name == ENTRY for n in tree.body)


def parse_source(source: str, path: Path | None = None) -> KernelFile:
    """Static checks that need no import: size, syntax, required names, tunables are literals."""
    where = str(path) if path else "kernel source"
    if len(source.encode()) > MAX_SOURCE_BYTES:
        raise KernelFileError(f"{where} is {len(source.encode())} bytes, over the {MAX_SOURCE_BYTES} limit")
    try:
        consts, has_entry = _module_facts(source)
    except SyntaxError as exc:
        raise KernelFileError(f"{where}: syntax error at line {exc.lineno}: {exc.msg}") from exc
    consts = copy.deepcopy(consts)  # the cached facts stay as parsed whatever a caller does with its copy
    for name in ("KERNEL_TYPE", "BACKEND"):
        if not isinstance(consts.get(name), str):
            raise KernelFileError(f"{where}: missing {name} = \"...\" at module level")
    if consts["BACKEND"] not in ("triton", "cuda"):
        raise KernelFileError(f"{where}: BACKEND must be 'triton' or 'cuda', not {consts['BACKEND']!r}")
    if not has_entry:
        raise KernelFileError(f"{where}: no {ENTRY}() function at module level")
    space = consts.get("SEARCH_SPACE", {})
    if not isinstance(space, dict) or not all(isinstance(v, (list, tuple)) and v for v in space.values()):
        raise KernelFileError(f"{where}: SEARCH_SPACE must be a dict of non-empty lists of literals")
    config = {}
    for name in space:
        if name not in consts:
            raise KernelFileError(f"{where}: tunable {name} is in SEARCH_SPACE but not a module-level literal")
        config[name] = consts[name]
    structural = consts.get("STRUCTURAL", ())
    if not isinstance(structural, (list, tuple)):
        raise KernelFileError(f"{where}: STRUCTURAL must be a list of names of SEARCH_SPACE")
    # a file that narrows its space (a KernelBench solution built from a starter) keeps the rest
    structural = [n for n in structural if n in space]
    deterministic = bool(consts.get("DETERMINISTIC", True))
    reason = consts.get("NONDETERMINISM_REASON", "")
    if not deterministic and not (isinstance(reason, str) and reason.strip()):
        # the determinism stage is skipped only for a stated reason (atomics, split reductions...)
        raise KernelFileError(f"{where}: DETERMINISTIC = False needs NONDETERMINISM_REASON = \"...\" saying why two "
                              "runs on the same inputs may differ")
    return KernelFile(path=path, source=source, kernel_type=consts["KERNEL_TYPE"], backend=consts["BACKEND"],
                      search_space={k: list(v) for k, v in space.items()}, config=config,
                      deterministic=deterministic, nondeterminism_reason=reason.strip() if not deterministic else "",
                      structural=tuple(structural))


def read_kernel_file(path: str | Path) -> KernelFile:
    p = Path(path)
    try:
        source = p.read_text()
    except OSError as exc:
        raise KernelFileError(f"cannot read kernel file {p}: {exc.strerror}") from exc
    return parse_source(source, p)


_counter = itertools.count()


def import_kernel(kf: KernelFile, cache_dir: Path | None = None) -> ModuleType:
    """Execute the file as a fresh module. Triton's @jit needs real source lines, so the module is
    loaded from a file (the original, or a copy named by content hash under `cache_dir`, by default
    the AutoKernel cache, config.cache_dir())."""
    path = kf.path
    if path is None or not path.exists() or path.read_text() != kf.source:
        from autokernel.config import cache_dir as default_cache
        cache = Path(cache_dir) if cache_dir is not None else default_cache() / "kernel_sources"
        cache.mkdir(parents=True, exist_ok=True)
        path = cache / f"k_{kf.source_hash}.py"
        if not path.exists():
            path.write_text(kf.source)
    name = f"autokernel_candidate_{kf.source_hash}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KernelFileError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # triton and dataclasses look the module up by name
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:  # the file is untrusted code: any failure is the file's fault
        sys.modules.pop(name, None)
        raise KernelFileError(f"{kf.path or 'kernel source'} failed to import: {type(exc).__name__}: {exc}") from exc
    if not callable(getattr(mod, ENTRY, None)):
        raise KernelFileError(f"{kf.path or 'kernel source'}: {ENTRY} is not callable")
    return mod


def entry_point(mod: ModuleType) -> Callable:
    return getattr(mod, ENTRY)


def config_is_valid(mod_or_none: ModuleType | None, kf: KernelFile, config: dict[str, Any]) -> bool:
    """Values inside the declared space, and the file's own valid_config() if it has one."""
    for k, v in config.items():
        if k not in kf.search_space or v not in kf.search_space[k]:
            return False
    check = getattr(mod_or_none, "valid_config", None) if mod_or_none is not None else None
    if check is None:
        return True
    try:
        return bool(check(dict(kf.config, **config)))
    except Exception:
        return False


def _assignment(name: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(name)}\s*=\s*[^\n#]*?(\s*#[^\n]*)?$", re.MULTILINE)


def _rewrite_multiline(source: str, name: str, value: Any) -> str | None:
    """`name = value` in place of a module-level assignment to `name` that spans several lines (a
    per-shape table written out by a benchmark), or None when there is none."""
    lines = source.splitlines(keepends=True)
    for node in pyast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id == name and node.col_offset == 0:
            tail = lines[node.end_lineno - 1][node.end_col_offset:]  # a comment after it, the newline
            return "".join(lines[:node.lineno - 1]) + f"{name} = {value!r}{tail}" + "".join(lines[node.end_lineno:])
    return None


@functools.lru_cache(maxsize=64)
def _multiline_names(source: str) -> frozenset[str]:
    """Names whose module-level assignment spans several lines (the regex in with_config would take
    only the first line). Cached: the search rewrites the same best's source at every proposal."""
    return frozenset(n.targets[0].id for n in pyast.parse(source).body
                     if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                     and n.end_lineno > n.lineno)


def with_config(source: str, config: dict[str, Any]) -> str:
    """Rewrite the tunables' assignment lines; everything else in the file stays byte for byte."""
    out = source
    multiline = _multiline_names(source)
    for name, value in config.items():
        new = _rewrite_multiline(out, name, value) if name in multiline else None
        if new is None:
            new, n = _assignment(name).subn(lambda m: f"{name} = {value!r}{m.group(1) or ''}", out, count=1)
            if n != 1:
                raise KernelFileError(f"tunable {name} has no module-level assignment to rewrite")
        out = new
    return out


def candidate_key(source: str, effective: dict[str, Any]) -> str:
    """A candidate's identity: its effective configuration (the tunables that matter for the
    kernel's dtype, see autokernel.declared) and the rest of its source with every tunable's value
    blanked. Two files that differ only in tunables the kernel ignores have one key; any other
    edit (an LLM's) makes a new one. 32 hex digits of sha256."""
    text = json.dumps(effective, sort_keys=True, default=str) + "\0" + rest_of(source)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def rest_of(source: str) -> str:
    """The source with every tunable's value blanked: two files with equal rests differ only in
    their configuration."""
    kf = parse_source(source)
    rest = source
    for name in kf.search_space:
        rest = _assignment(name).sub(f"{name} = ...", rest, count=1)
    return rest
