"""Smaller instances of an official KernelBench problem, for checking its generated start on the CPU.

KernelBench's shapes are sized for a GPU: under the Triton interpreter one call of L1 42 (a
32x64x512x512 max pool) would take hours. The problem's op structure is kept and only its sizes
change: every module-level name bound to an integer literal (or an expression of literals, or a
list / tuple of them: `layer_sizes = [16384, 16384]`) above `cap` becomes `cap/2 + v % (cap/2)`,
so its residue modulo every power of two up to cap/2 stays (an odd size stays odd, a multiple of
16 stays one, 8205 stays ragged) and small divisors stay divisors (768 heads of 8: 768 -> 32);
names with "batch" in them drop to at most `batch` (with `tie_batch`, a batch size equal to another
size of the file shrinks as that one does: L1 100's (32768, 32768) predictions times 32768 targets
broadcast only while the two are equal). Names bound to expressions of other names
(`bias_shape = (out_channels, 1, 1)`, `out = in_channels * 2`) are left as they are and follow.
Sizes written inside get_inputs() stay (the few 224x224 images of level 3).

The caller checks what a shrink kept (the reference still runs, the generated start is built from
the same ops) and tries a milder cap when it did not: see `shrink_candidates`.
"""

from __future__ import annotations

import ast
import math
from typing import Iterator

from autokernel.kb.problems import Problem

# tried in this order (the last shrinks the batch only), then the problem as it is: the interpreter
# runs an implicit-GEMM convolution at cap 16 in seconds, at cap 64 in minutes
CAPS = (16, 64, 256, 1 << 62)
SMALL_BATCH = 2


def _literal_int(node) -> int | None:
    """The value of an int literal or an arithmetic expression of int literals, else None."""
    if not all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop)) for n in ast.walk(node)):
        return None
    try:
        v = eval(compile(ast.Expression(node), "<size>", "eval"), {"__builtins__": {}})
    except Exception:
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def shrink_value(v: int, cap: int, batch: bool = False, smalls: frozenset = frozenset()) -> int:
    """v's smaller stand-in; `smalls`: the file's other small sizes (heads, groups): those dividing v
    divide the result too (768 with 12 heads stays a multiple of 12)."""
    if batch:
        return min(v, SMALL_BATCH)
    if v <= cap:
        return v
    base = cap // 2
    new = base + v % base
    lcm = 1
    for d in smalls:
        if v % d == 0:
            lcm = lcm * d // math.gcd(lcm, d)
    if new % lcm:
        new = lcm * -(-base // lcm)
    return new


def shrink_code(code: str, cap: int, keep: frozenset = frozenset(), tie_batch: bool = False) -> tuple[str, dict]:
    """(the code with its module-level sizes shrunk, {name: (old, new)} of what changed); the
    names in `keep` stay as they are."""
    tree = ast.parse(code)
    smalls, sizes = set(), set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and "batch" not in t.id.lower()
                                                for t in node.targets):
            elts = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            sizes.update(v for v in map(_literal_int, elts) if v is not None and tie_batch)
            v = _literal_int(node.value)
            if v is not None and 1 < v <= 16:  # heads, groups: not channel counts (64 divides everything)
                smalls.add(v)
    smalls = frozenset(smalls)
    changed: dict[str, tuple] = {}
    lines = code.splitlines(keepends=True)
    edits = []  # (line, col, end_line, end_col, new text), applied from the end
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if len(names) != len(targets) or set(names) & keep:
            continue
        is_batch = any("batch" in n.lower() for n in names)
        value = node.value
        if isinstance(value, (ast.List, ast.Tuple)):
            items = [_literal_int(e) for e in value.elts]
            if not items or any(i is None for i in items):
                continue
            new = [shrink_value(i, cap, is_batch and i not in sizes, smalls) for i in items]
            if new == items:
                continue
            text = repr(new) if isinstance(value, ast.List) else repr(tuple(new))
            old = items
        else:
            old = _literal_int(value)
            if old is None:
                continue
            new = shrink_value(old, cap, is_batch and old not in sizes, smalls)
            if new == old:
                continue
            text = repr(new)
        edits.append((value.lineno, value.col_offset, value.end_lineno, value.end_col_offset, text))
        for n in names:
            changed[n] = (old, new)
    for line, col, end_line, end_col, text in sorted(edits, reverse=True):
        head = lines[line - 1][:col]
        tail = lines[end_line - 1][end_col:]
        lines[line - 1:end_line] = [head + text + tail]
    return "".join(lines), changed


def shrink_candidates(problem: Problem) -> Iterator[tuple[Problem, dict]]:
    """Smaller instances of the problem, mildest last (each cap also with tied batch sizes, where
    that differs); then the smallest with one size left as it is, for each size (a head dim that
    decides the kernel: L1 97's 1024); then the problem itself ({} changed)."""
    seen = set()

    def make(code, tag):
        return Problem(problem.source, problem.level, problem.problem_id, problem.name, code, problem.path, size=tag)

    for cap in CAPS:
        for tie in (False, True):
            code, changed = shrink_code(problem.code, cap, tie_batch=tie)
            if not changed or code in seen:
                continue
            seen.add(code)
            yield make(code, f"cap{cap}" + "-tied" * tie), changed
    _, smallest = shrink_code(problem.code, CAPS[0])
    for name in smallest:
        code, changed = shrink_code(problem.code, CAPS[0], keep=frozenset({name}))
        if changed and code not in seen:
            seen.add(code)
            yield make(code, f"cap{CAPS[0]}-but-{name}"), changed
    yield problem, {}
