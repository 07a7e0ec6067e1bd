"""A library starter's source as a solution file takes it: without its header, the constants its
valid_config reads inlined, its names prefixed when it is a second starter in the file.
"""

from __future__ import annotations

import ast
import functools
import re

from autokernel.kb.templates import Template, split_source


def starter_pieces(kernel_type: str) -> tuple[str, dict]:
    """The starter's source without its docstring and KERNEL_TYPE/BACKEND/SEARCH_SPACE lines, and its space."""
    from autokernel.kernels import starter_path

    src = starter_path(kernel_type, "triton").read_text()
    tree = ast.parse(src)
    space = split_source(src).space
    lines = src.splitlines()
    # The search proposer evaluates valid_config() alone (no module globals): module-level
    # constants it reads (e.g. the matmul starter's SMEM_LIMIT) are inlined as literals.
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Name,
                                  ast.Load)) for n in ast.walk(node.value)):
                try:  # literals and arithmetic on earlier constants (SMEM_LIMIT = 227 * 1024)
                    consts[node.targets[0].id] = eval(compile(ast.Expression(node.value), "<const>", "eval"),
                                                      {"__builtins__": {}}, dict(consts))
                except Exception:
                    pass
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "valid_config":
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in consts and n.id not in space}
            for i in range(node.lineno - 1, node.end_lineno):
                for name in used:
                    if not lines[i].lstrip().startswith("#"):
                        lines[i] = re.sub(rf"\b{re.escape(name)}\b", repr(consts[name]), lines[i])
            # tunables left out of the file's space (fp32 problems) keep their current values
            defaults = {k: consts[k] for k in space if k in consts}
            indent = " " * (node.body[0].col_offset if node.body else 4)
            lines[node.lineno - 1] += f"\n{indent}cfg = {{**{defaults!r}, **cfg}}"
    return split_source("\n".join(lines), drop_imports=False, drop_names=("KERNEL_TYPE", "BACKEND")).body, space


_SHARED = {"launch", "cdiv", "next_power_of_2"}  # the launcher's names: one copy for both starters


def prefixed_starter(kernel_type: str, prefix: str) -> tuple[str, dict]:
    """A second starter in the same file (flash attention next to the matmul starter): every
    module-level name it defines renamed with `prefix`, so its constants, kernels and kernel_fn
    do not collide with the first's; its tunables under the new names."""
    src, space = starter_pieces(kernel_type)
    tree = ast.parse(src)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return renamed(src, names - _SHARED, prefix), {prefix + k: v for k, v in space.items()}


def helper_template(kernel_type: str, module: str = "kb_helper", prefix: str = "") -> Template:
    """A helper template of the type's folder, split for a solution file; with `prefix` (its
    starter is a second one in the file), the starter's names it imports renamed as
    prefixed_starter renames them."""
    from autokernel.kernels import registry

    src = registry.kb_helper_path(kernel_type, module).read_text()
    t = split_source(src)
    if not prefix:
        return t
    starter = f"{registry.package(kernel_type).__name__}.triton_starter"
    names = {a.name for node in ast.parse(src).body if isinstance(node, ast.ImportFrom) and node.module == starter
             for a in node.names}
    return Template(renamed(t.body, names - _SHARED, prefix), t.space, t.entry)


def helper_needs(kernel_type: str, module: str = "kb_helper") -> set[str]:
    """The kb templates a helper of the type's folder calls (it imports from them), which the
    solution file must hold too (the matmul helper adds a bias with the elementwise kernel)."""
    from autokernel.kernels import registry

    tree = ast.parse(registry.kb_helper_path(kernel_type, module).read_text())
    return {n.module.rsplit(".", 1)[1] for n in tree.body
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(f"{__package__}.templates.")}


def renamed(src: str, names: set, prefix: str) -> str:
    """src with every name token in `names` (not an attribute after a dot) prefixed."""
    import io
    import tokenize

    out, prev = [], None
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.NAME and tok.string in names and not (prev is not None and prev.string == "."):
            tok = tok._replace(string=prefix + tok.string)
        out.append(tok)
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            prev = tok
    return tokenize.untokenize(out)


@functools.lru_cache(maxsize=None)
def starter_constant(kernel_type: str, name: str):
    """A module-level literal of a starter (e.g. flash_attention's MAX_HEAD_DIM), read from its source."""
    from autokernel.kernels import starter_path

    for node in ast.parse(starter_path(kernel_type, "triton").read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise KeyError(f"{kernel_type} starter has no constant {name}")


def strip_docstring(src: str) -> str:
    tree = ast.parse(src)
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        lines = src.splitlines()
        n = tree.body[0]
        return "\n".join(lines[:n.lineno - 1] + lines[n.end_lineno:])
    return src
