"""No `_private` name is reached across the package's seams: what one part of autokernel/ uses of
another has a public name. A part is a top-level module (autokernel/loop.py) or a subpackage
(autokernel/bench/); inside a part, modules share their private names freely.

Flagged: `from autokernel.x import _name`, an import of a private module, and `m._name` where `m`
is a module or a name imported from another part (`Workspace._head`, `build._tail`). Aliasing a
public name (`import x as _x`, `from a import b as _b`) is fine. A private attribute of an instance
cannot be seen without types; reviews catch those."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Skipped: self-contained kernel files and KernelBench problem files (they import nothing of ours).
SKIP_PARTS = {"starters", "sample"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _part(module: str) -> str:
    """autokernel.bench.judge -> autokernel.bench; autokernel.loop -> autokernel.loop."""
    return ".".join(module.split(".")[:2])


def _module_name(package_root: Path, path: Path) -> str:
    parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def reach_ins(package_root: Path) -> list[str]:
    """Every place under `package_root` (an `autokernel` folder) that uses a private name of another part."""
    files = [p for p in sorted(package_root.rglob("*.py")) if not SKIP_PARTS & set(p.parts)]
    modules = {_module_name(package_root, p) for p in package_root.rglob("*.py")}
    top = package_root.name
    found = []
    for path in files:
        here = _part(_module_name(package_root, path))
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(package_root.parent)
        bound: dict[str, str] = {}  # local name -> the module of another part it comes from
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == top:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    source = full if full in modules else node.module
                    if _part(source) == here:
                        continue
                    if _private(alias.name) or any(_private(p) for p in node.module.split(".")):
                        found.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
                    bound[alias.asname or alias.name] = source
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] != top or _part(alias.name) == here:
                        continue
                    if any(_private(p) for p in alias.name.split(".")):
                        found.append(f"{where}:{node.lineno}: import {alias.name}")
                    if alias.asname:
                        bound[alias.asname] = alias.name
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            chain, base = [], node.value
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if not isinstance(base, ast.Name):
                continue
            if not chain and base.id in bound:
                found.append(f"{where}:{node.lineno}: {base.id}.{node.attr} (from {bound[base.id]})")
            elif base.id == top and chain and _part(".".join([top, *reversed(chain)])) != here:
                found.append(f"{where}:{node.lineno}: {'.'.join([top, *reversed(chain)])}.{node.attr}")
    return found


def test_no_private_name_is_used_across_parts():
    found = reach_ins(ROOT / "autokernel")
    assert found == [], "private names used across autokernel's parts (give them a public name):\n" + "\n".join(found)


def test_the_checker_sees_each_kind_of_reach_in(tmp_path):
    pkg = tmp_path / "autokernel"
    (pkg / "bench").mkdir(parents=True)
    (pkg / "kernels" / "starters").mkdir(parents=True)
    for f in ("__init__.py", "bench/__init__.py", "kernels/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "bench" / "judge.py").write_text("def _arm(): pass\ndef arm(): pass\n")
    (pkg / "bench" / "stages.py").write_text("from autokernel.bench.judge import _arm\n")  # same part: fine
    (pkg / "loop.py").write_text("class _Loop:\n    def _start(self): pass\n")
    (pkg / "kernels" / "starters" / "mm.py").write_text("from autokernel.loop import _Loop\n")  # skipped
    (pkg / "worker.py").write_text(
        "import autokernel.bench.judge as bj\n"
        "from autokernel.bench import judge\n"
        "from autokernel.bench.judge import arm as _arm\n"  # a public name aliased: fine
        "from autokernel.loop import _Loop\n"
        "import autokernel.bench.judge\n"
        "judge._arm()\nbj._arm()\nautokernel.bench.judge._arm()\n_arm()\n")
    got = reach_ins(pkg)
    assert got == ["autokernel/worker.py:4: from autokernel.loop import _Loop",
                   "autokernel/worker.py:6: judge._arm (from autokernel.bench.judge)",
                   "autokernel/worker.py:7: bj._arm (from autokernel.bench.judge)",
                   "autokernel/worker.py:8: autokernel.bench.judge._arm"]
