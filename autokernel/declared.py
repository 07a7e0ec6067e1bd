"""What a kernel file declares about its tunables, evaluated without importing the file.

A kernel file may declare two pure functions of a configuration:
    def valid_config(cfg): ...            combinations that cannot work (shared memory, registers)
    def effective_config(cfg, dtype): ... the tunables that matter for a dtype (matmul's FP32_* ones
                                          do nothing for bf16 inputs): the search samples only
                                          those, and a candidate's key hashes only those
Each is compiled alone with a few pure builtins and the file's constants that are plain arithmetic
on literals (SMEM_LIMIT = 227 * 1024): the search decides without importing the kernel (no triton,
no module-level side effects, nothing that can read the environment). A function that raises says
no (valid_config) or everything matters (effective_config).

On top of the file's own valid_config, `fits_device` is a conservative estimate of what a Triton
program of the configuration needs (pipelined dot tiles in shared memory, the fp32 accumulator in
registers, threads per block), so that a configuration no GPU of the class can run is rejected
before anything is compiled.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
from typing import Any, Callable, Optional

from autokernel import pyast

_SAFE_BUILTINS = {n: getattr(builtins, n) for n in (
    "abs", "all", "any", "bool", "dict", "float", "int", "isinstance", "len", "list", "max", "min",
    "range", "round", "set", "sorted", "str", "sum", "tuple", "zip", "True", "False", "None")
    if hasattr(builtins, n)}

_CONST_NODES = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Tuple, ast.List, ast.Dict,
                ast.operator, ast.unaryop)

# Conservative per-block limits of the GPUs the bench targets (sm_80 and later): Hopper's opt-in
# shared memory per block, 255 32-bit registers per thread (the fp32 accumulator gets at most
# ACC_REGS of them), 1024 threads per block.
SMEM_BYTES = 227 * 1024
ACC_REGS = 256
MAX_WARPS = 32
# the dtype names a kernel row may carry, as effective_config receives them (no torch here)
_DTYPES = {"fp32": "float32", "f32": "float32", "float": "float32", "fp16": "float16", "f16": "float16",
           "half": "float16", "bf16": "bfloat16"}


def canonical_dtype(dtype: str) -> str:
    return _DTYPES.get(str(dtype), str(dtype))


def _constant_assignment(node: ast.stmt) -> bool:
    """NAME = <literals (tuples, lists and dicts of them too: a SEARCH_SPACE) and names combined by
    arithmetic>, nothing that calls or imports."""
    if isinstance(node, ast.AnnAssign):
        targets, value = [node.target], node.value
    elif isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    else:
        return False
    return (value is not None and all(isinstance(t, ast.Name) for t in targets)
            and all(isinstance(n, _CONST_NODES) for n in ast.walk(value)))


def declared_function(source: str, name: str) -> Optional[Callable]:
    """The file's module-level function `name`, compiled alone in the sandbox; None when absent.
    Each call gets its own namespace (a function that writes its globals changes no other call's)."""
    compiled = _compiled(source, name)
    if compiled is None:
        return None
    consts, fn = compiled
    ns: dict[str, Any] = {"__builtins__": _SAFE_BUILTINS}
    for code in consts:
        try:
            exec(code, ns)
        except Exception:  # refers to something imported or computed: the function must do without
            pass
    exec(fn, ns)
    return ns[name]


@functools.lru_cache(maxsize=64)
def _compiled(source: str, name: str) -> Optional[tuple[tuple[Any, ...], Any]]:
    """(the constants' code objects, the function's) of `name` in `source`. Cached: the search asks
    for the same file's valid_config and effective_config at every proposal, and parsing and
    compiling each constant took ~30 ms of a ~0.5 s proposal (2-core CPU, matmul, 300 trials)."""
    tree = pyast.parse(source)
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if node is None:
        return None
    consts = tuple(pyast.compile_tree(ast.Module(body=[c], type_ignores=[]), "<constant>")
                   for c in tree.body if _constant_assignment(c))
    return consts, pyast.compile_tree(ast.Module(body=[node], type_ignores=[]), f"<{name}>")


def valid_config_fn(source: str) -> Optional[Callable[[dict], bool]]:
    """The file's valid_config(cfg) as a function that never raises (an error is a no)."""
    fn = declared_function(source, "valid_config")
    if fn is None:
        return None

    def check(cfg: dict) -> bool:
        try:
            return bool(fn(dict(cfg)))
        except Exception:
            return False

    return check


def effective_fn(source: str, dtype: str, shapes: list[dict] | None = None) -> Callable[[dict], dict[str, Any]]:
    """cfg -> the part of cfg the kernel reads for `dtype` (and, given, the kernel's `shapes`): the
    file's effective_config(cfg, dtype[, shapes]) asked of cfg itself, else all of cfg. What a file
    reads may depend on cfg's own values (fused_mlp reads GU_ORDER only where GU_VARIANT is
    "persistent"), so two configurations are the same candidate when their own effective parts
    agree: the loop's key (screening.key_of) says so, and the search must say the same (an H100
    run had fused_mlp set aside after three such proposals the loop had judged before)."""
    fn = declared_function(source, "effective_config")
    if fn is None:
        return dict
    try:
        extra = [list(shapes)] if shapes is not None and len(inspect.signature(fn).parameters) >= 3 else []
    except (TypeError, ValueError):
        extra = []
    dt = canonical_dtype(dtype)

    def part(cfg: dict) -> dict[str, Any]:
        try:
            kept = fn(dict(cfg), dt, *extra)
        except Exception:
            return dict(cfg)
        return {n: v for n, v in cfg.items() if n in kept} or dict(cfg)

    return part


def effective_names(source: str, config: dict[str, Any], dtype: str, shapes: list[dict] | None = None) -> list[str]:
    """The tunables that matter for `dtype` (and, given, the kernel's `shapes`) at `config`: the
    file's effective_config(cfg, dtype[, shapes]), else all."""
    return list(effective_fn(source, dtype, shapes)(config))


def effective(config: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {n: config[n] for n in names if n in config}


def _tile_groups(cfg: dict[str, Any]) -> list[tuple[str, int, int, int, int, int]]:
    """(prefix, BM, BN, BK, warps, stages) of every dot tiling the names spell out: PREFIX + BLOCK_M,
    BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES (matmul's "", "FP32_"; fused_mlp's "GU_", "DOWN_")."""
    out = []
    for key in cfg:
        if not key.endswith("BLOCK_M"):
            continue
        p = key[: -len("BLOCK_M")]
        vals = [cfg.get(p + s) for s in ("BLOCK_M", "BLOCK_N", "BLOCK_K")]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            warps = cfg.get(p + "NUM_WARPS", cfg.get("NUM_WARPS", 4))
            stages = cfg.get(p + "NUM_STAGES", cfg.get("NUM_STAGES", 2))
            if isinstance(warps, int) and isinstance(stages, int):
                out.append((p, *vals, warps, stages))
    return out


def fits_device(cfg: dict[str, Any], dtype: str, smem_bytes: int = SMEM_BYTES) -> Optional[str]:
    """Why the configuration cannot run on the device class, or None when it may. Conservative:
    only what certainly fails (Triton would refuse to launch, or spill the accumulator)."""
    for name, value in cfg.items():
        if name.endswith("WARPS") and isinstance(value, int) and not isinstance(value, bool) and value > MAX_WARPS:
            return f"{name}={value}: more than {MAX_WARPS} warps (1024 threads) per block"
    elem = 4 if canonical_dtype(dtype) == "float32" else 2
    for p, bm, bn, bk, warps, stages in _tile_groups(cfg):
        e = 4 if p.startswith("FP32") else elem
        smem = (bm * bk + bk * bn) * e * max(1, stages - 1)
        if smem > smem_bytes:
            return (f"{p}tiles {bm}x{bn}x{bk} with {stages} stages need {smem // 1024} KB of shared memory "
                    f"(> {smem_bytes // 1024} KB)")
        acc = bm * bn // (32 * max(1, warps))
        if acc > ACC_REGS:
            return f"{p}accumulator {bm}x{bn} over {warps} warps needs {acc} registers per thread (> {ACC_REGS})"
    return None
