"""The code the KB compiler writes into a solution file, as importable, linted, tested modules with
a starter's anatomy: docstring, imports (torch, triton, tl, the launch path, the templates or
starters whose names it calls), tunables and kernels, SEARCH_SPACE and, for a generated kernel
family, the `kernel_fn` entry of a file where it is the only kernel. `template` splits a module's
source into what the self-contained file gets: the body without docstring and imports (the file
defines those names itself), the tunables and the entry.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Template:
    body: str  # the source the solution file gets
    space: dict  # its SEARCH_SPACE
    entry: str  # its kernel_fn, or ""


def split_source(src: str, drop_imports: bool = True, drop_names: tuple = ()) -> Template:
    """The source of a template or starter without its docstring, top-level imports (with
    `drop_imports`), SEARCH_SPACE and the assignments named in `drop_names`; its SEARCH_SPACE; its
    kernel_fn (templates only: a starter's kernel_fn stays in its body)."""
    tree = ast.parse(src)
    lines = src.splitlines()
    drop, space, entry = set(), {}, ""
    for i, node in enumerate(tree.body):
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        span = set(range(first, node.end_lineno + 1))
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            drop |= span  # the module docstring
        elif drop_imports and isinstance(node, (ast.Import, ast.ImportFrom)):
            drop |= span
        elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["SEARCH_SPACE"]:
            space = ast.literal_eval(node.value)
            drop |= span
        elif isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) in drop_names:
            drop |= span
        elif drop_imports and isinstance(node, ast.FunctionDef) and node.name == "kernel_fn":
            entry = "\n\n" + "\n".join(lines[first - 1:node.end_lineno]) + "\n"
            drop |= span
    keep = "\n".join(ln for n, ln in enumerate(lines, 1) if n not in drop)
    while "\n\n\n\n" in keep:
        keep = keep.replace("\n\n\n\n", "\n\n\n")
    return Template("\n" + keep.strip("\n") + "\n", space, entry)


PUBLIC_ALIASES = ("kb_ew",)  # public names of _kb_ functions, for importers outside kb; no file needs them


@functools.cache
def template(name: str) -> Template:
    """The template module `name` of this package, split for a solution file."""
    return split_source((resources.files(__package__) / f"{name}.py").read_text(), drop_names=PUBLIC_ALIASES)
