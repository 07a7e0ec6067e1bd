"""Python's ast module, one thread at a time.

CPython 3.11 keeps the depth counter of its AST conversion in one place per interpreter, not per
thread: two threads in ast.parse (or compiling an AST object) at once can fail with "SystemError:
AST constructor recursion depth mismatch". A pool's judges parse candidates in threads of the
coordinator while it parses the next proposals, so every parse of a kernel file goes through here.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename=filename)


def compile_tree(tree: ast.AST, filename: str, mode: str = "exec") -> Any:
    """compile() of an AST object (the other direction of the same conversion)."""
    with _LOCK:
        return compile(tree, filename, mode)
