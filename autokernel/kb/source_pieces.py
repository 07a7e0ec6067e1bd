"""The source pieces of a KernelBench starting solution: the generic elementwise Triton kernel
(written here, for every floating-point elementwise op of a problem), the per-library helper
functions that adapt a problem's call (bmm, linear with bias, softmax over any dim...) to a starter's
kernel_fn, the entry functions of files without a library starter, and the starter's own source
with its header stripped and the constants its valid_config reads inlined. solutions.py puts them
together into one kernel file.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re

def _kb_block(full, shape):
    """(inner, size) when a tensor of `shape` broadcasts to `full` with its non-1 dims one run of
    full's dims ([C, 1, 1] against [N, C, H, W]): element i of the broadcast is element
    (i // inner) % size of the tensor. None otherwise, or past the kernels' 32-bit index. The
    generator uses it on traced shapes; the solution file carries its source for run-time shapes."""
    if len(shape) > len(full):
        return None
    shape = (1,) * (len(full) - len(shape)) + tuple(shape)
    big = [d for d, v in enumerate(shape) if v != 1]
    if big and any(shape[d] != full[d] for d in range(big[0], big[-1] + 1)):
        return None
    inner = size = 1
    for v in full[big[-1] + 1:] if big else ():
        inner *= v
    for v in shape:
        size *= v
    return (inner, size) if inner < 2**30 and size < 2**30 else None


LAUNCH_IMPORT = '''
try:  # the lean launch path (autokernel/kernels/launcher.py); standalone, the file launches the usual way
    from autokernel.kernels.launcher import cdiv, launch, next_power_of_2
except ImportError:
    cdiv, next_power_of_2 = triton.cdiv, triton.next_power_of_2

    def launch(kernel, grid, *args, **meta):
        return kernel[grid](*args, **meta)
'''

EW_SOURCE = '''
# ---- generic elementwise Triton kernel (autokernel kb) -------------------------------------------
EW_BLOCK = 1024
EW_WARPS = 4


@triton.jit
def _kb_softplus(x, beta, threshold):
    # PyTorch's: x itself above the threshold; exp(bx)/b far below 0, where 1 + exp(bx) rounds to 1
    bx = x * beta
    mid = tl.log(1.0 + tl.exp(tl.minimum(bx, threshold))) / beta
    return tl.where(bx > threshold, x, tl.where(bx < -15.0, tl.exp(tl.minimum(bx, -15.0)) / beta, mid))


@triton.jit
def _kb_mish(x):
    # tanh(log(1 + e^x)) = n(n + 2) / (n(n + 2) + 2) with n = e^x: no cancellation for x < 0, and
    # exactly 1 in fp32 once x passes 20 (PyTorch's softplus threshold)
    n = tl.exp(tl.minimum(x, 20.0))
    m = n * (n + 2.0)
    return x * (m / (m + 2.0))


@triton.jit
def _kb_smooth_l1(d, beta):
    # F.smooth_l1_loss per element of d = input - target; beta == 0 selects |d| (torch's l1_loss)
    ad = tl.abs(d)
    return tl.where(ad < beta, 0.5 * d * d / beta, ad - 0.5 * beta)


@triton.jit
def _kb_ew_kernel(x_ptr, y_ptr, out_ptr, n, ncols, alpha, beta, inner, size, OP: tl.constexpr,
                  HAS_Y: tl.constexpr, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * BLOCK
    offs = base + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0).to(tl.float32)
    if HAS_Y == 1:  # y of x's shape
        y = tl.load(y_ptr + offs, mask=mask, other=1.0).to(tl.float32)
    elif HAS_Y == 2:  # y a row along the last dim (a bias)
        y = tl.load(y_ptr + offs % ncols, mask=mask, other=1.0).to(tl.float32)
    elif HAS_Y == 3:  # y broadcast over a run of x's dims ([C, 1, 1], [rows, 1], one element)
        y = tl.load(y_ptr + _kb_bidx(base, inner, size, BLOCK), mask=mask, other=1.0).to(tl.float32)
    else:
        y = alpha
    # @OPS@
    tl.store(out_ptr + offs, r.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _kb_bidx(base, inner, size, BLOCK: tl.constexpr):
    # (offs // inner) % size for offs = base + arange(BLOCK): the 64-bit division once per
    # program, 32-bit ones per element (a 64-bit division per element costs more than the load)
    q0 = ((base // inner) % size).to(tl.int32)
    j = (base % inner).to(tl.int32) + tl.arange(0, BLOCK)
    if inner >= BLOCK:  # j < 2 * inner: the block crosses at most one boundary, no division per element
        q = q0 + (j >= inner).to(tl.int32)
        idx = tl.where(q >= size, q - size, q)
    else:
        idx = (q0 + j // inner) % size
    return idx


# @BLOCK@


_KB_SWAP = {10: 10, 11: 14, 12: 12, 13: 15, 16: 16, 17: 17}  # x OP y == y OP' x


def _kb_ew(op, x, y=None, alpha=0.0, beta=0.0):
    """out = op(x[, y]) elementwise; y a tensor (broadcast) or None (scalar alpha)."""
    mode, inner, size = 0, 1, 1
    if isinstance(y, torch.Tensor):
        shape = torch.broadcast_shapes(x.shape, y.shape)
        dtype = torch.result_type(x, y)
        if tuple(shape) != tuple(x.shape) and tuple(shape) == tuple(y.shape) and op in _KB_SWAP:
            # x is the broadcast one (diag(a) @ B written a[:, None] * B): swapped, so that it is
            # indexed in place instead of expanded into a copy of B's size
            x, y, op = y, x, _KB_SWAP[op]
        if y.dim() == 1 and x.dim() >= 1 and tuple(shape) == tuple(x.shape) and y.shape[0] == x.shape[-1]:
            mode, xx, yy = 2, x.to(dtype).contiguous(), y.to(dtype).contiguous()
        elif tuple(shape) == tuple(x.shape) and (block := _kb_block(shape, y.shape)):
            mode, xx, yy = 3, x.to(dtype).contiguous(), y.to(dtype).contiguous()
            inner, size = block
        else:
            mode = 1
            xx = x.to(dtype).expand(shape).contiguous()
            yy = y.to(dtype).expand(shape).contiguous()
    else:
        shape, dtype = x.shape, x.dtype
        xx = x.contiguous()
        yy = xx
    out = torch.empty(shape, device=x.device, dtype=dtype)
    n = out.numel()
    if n == 0:
        return out
    launch(_kb_ew_kernel, (cdiv(n, EW_BLOCK),), xx, yy, out, n, max(1, xx.shape[-1] if xx.dim() else 1),
                                               float(alpha), float(beta), inner, size, OP=op, HAS_Y=mode,
                                               BLOCK=EW_BLOCK, num_warps=EW_WARPS)
    return out
'''

EW_SPACE = {"EW_BLOCK": [256, 512, 1024, 2048, 4096], "EW_WARPS": [1, 2, 4, 8]}

HELPERS = {
    "matmul": '''
def _kb_mm(a, b):
    if a.dim() == 2 and b.dim() == 2:
        return kernel_fn(a, b)
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] == b.shape[0]:
        return bmm(a, b)
    if a.dim() == b.dim() > 3 and a.shape[:-2] == b.shape[:-2]:  # [B, H, M, K] @ [B, H, K, N]: one bmm
        return bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])).reshape(*a.shape[:-1], b.shape[-1])
    if b.dim() == 2:
        return kernel_fn(a.reshape(-1, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])
    return torch.matmul(a, b)


def _kb_linear(x, weight, bias=None):
    y = kernel_fn(x.reshape(-1, x.shape[-1]), weight.t())
    if bias is not None:
        y = _kb_ew(10, y, bias)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def _kb_sdpa_mm(q, k, v, causal=False, scale=None):
    """scaled_dot_product_attention for what the flash starter does not take (head dims past its
    budget, q and kv of different lengths): scores and output by bmm, the softmax in fp32 by torch."""
    B, H, S, D = q.shape
    Hkv, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    if Hkv != H:  # GQA
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    scores = bmm(q.reshape(B * H, S, D), k.reshape(B * H, Sk, D).transpose(1, 2)).float()
    scores = scores * (D ** -0.5 if scale is None else scale)
    if causal:  # top-left aligned, as SDPA's is_causal
        scores = scores.masked_fill(torch.ones(S, Sk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.softmax(scores, dim=-1).to(q.dtype)
    return bmm(p, v.reshape(B * H, Sk, Dv)).reshape(B, H, S, Dv)
''',
    "softmax": '''
def _kb_softmax(x, dim=-1, contiguous=False, log=False):
    """softmax(x, dim) (log_softmax with `log`) for one dim, as the row softmax of a
    [rows, x.shape[dim]] matrix."""
    dim = dim % x.dim()
    n = x.shape[dim]
    if dim == x.dim() - 1:
        return kernel_fn(x.reshape(-1, n), log).reshape(x.shape)
    # Moved last with a copy: read in place, each row would be strided by the inner size (one
    # element per row of a column, uncoalesced).
    moved = x.movedim(dim, -1).contiguous()
    y = kernel_fn(moved.reshape(-1, n), log).reshape(moved.shape).movedim(-1, dim)
    # y is a permuted view (dim 1 of NCDHW: channels-last strides), which torch ops take as it
    # is; the generator asks for x's layout back only where a .view or the model's return needs it.
    return y.contiguous() if contiguous else y
''',
    "layernorm": '''
def _kb_layer_norm(x, weight, bias, eps):
    # normalized_shape may span several trailing dims (weight has its shape): one row of their product
    cols = weight.numel()
    return kernel_fn(x.reshape(-1, cols), weight.reshape(-1), bias.reshape(-1), eps).reshape(x.shape)
''',
    "rmsnorm": '''
def _kb_rms_norm(x, dim, eps, mean=True):
    """x / sqrt(mean(x ** 2, dim, keepdim=True) + eps) (the sum without `mean`) in one read and
    one write of x."""
    return rms_norm_dim(x, dim, eps, mean)
''',
    "reduce": '''
def _kb_sum(x, dim=None, keepdim=False):
    """torch.sum(x, dim, keepdim) over one dim, adjacent dims or all of x (None), x read in place."""
    return sum_dim(x, dim, keepdim)


def _kb_mean(x, dim=None, keepdim=False):
    return sum_dim(x, dim, keepdim, mean=True)
''',
    "flash_attention": '''
def _kb_sdpa(q, k, v, causal=False, scale=None):
    return kernel_fn(q, k, v, causal, scale)
''',

    "cross_entropy": '''
def _kb_cross_entropy(logits, targets):
    return kernel_fn(logits, targets)
''',
}

EW_ONLY_ENTRY = '''

def kernel_fn(x, y=None, op=0):
    """The file's entry function: the generic elementwise kernel."""
    return _kb_ew(op, x, y)
'''

TORCH_ONLY_ENTRY = '''

def kernel_fn(*args):
    """No kernel of its own: this starting point runs the reference's torch ops."""
    raise NotImplementedError("torch-only starting point")
'''

UNARY = {"relu": 0, "gelu": 1, "sigmoid": 3, "tanh": 4, "silu": 5, "exp": 6, "neg": 7, "abs": 8, "rsqrt": 9,
         "sqrt": 21, "log": 22, "mish": 23, "hardswish": 25, "selu": 29, "hardsigmoid": 30}
MISH, SOFTPLUS, HARDSWISH, ELU, SMOOTH_L1, CUBE, XLOGY = 23, 24, 25, 26, 27, 28, 31
MAXIMUM, MINIMUM, CLAMP = 16, 17, 18
BINARY = {"add": 10, "sub": 11, "mul": 12, "truediv": 13, "div": 13}
REVERSED = {10: 10, 11: 14, 12: 12, 13: 15}  # scalar OP tensor -> tensor OP' scalar

# each op of _kb_ew_kernel as one expression, for the generated fused kernels
OP_EXPR = {
    0: "tl.maximum({x}, 0.0)",
    1: "0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476))",
    2: "0.5 * {x} * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * (0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})))) - 1.0))",
    3: "1.0 / (1.0 + tl.exp(-{x}))",
    4: "2.0 / (1.0 + tl.exp(-2.0 * {x})) - 1.0",
    5: "{x} / (1.0 + tl.exp(-{x}))",
    6: "tl.exp({x})",
    7: "-{x}",
    8: "tl.abs({x})",
    9: "tl.rsqrt({x})",
    10: "{x} + {y}",
    11: "{x} - {y}",
    12: "{x} * {y}",
    13: "{x} / {y}",
    14: "{y} - {x}",
    15: "{y} / {x}",
    16: "tl.maximum({x}, {y})",
    17: "tl.minimum({x}, {y})",
    18: "tl.minimum(tl.maximum({x}, {a}), {b})",
    19: "tl.where({x} >= 0.0, {x}, {x} * {a})",
    20: "{x} * {x}",
    21: "tl.sqrt({x})",
    22: "tl.log({x})",
    23: "_kb_mish({x})",
    24: "_kb_softplus({x}, {a}, {b})",
    25: "{x} * tl.minimum(tl.maximum({x} + 3.0, 0.0), 6.0) / 6.0",
    26: "tl.where({x} > 0.0, {x}, {a} * (tl.exp({x}) - 1.0))",
    27: "_kb_smooth_l1({x} - {y}, {a})",
    28: "{x} * {x} * {x}",
    29: "1.0507009873554805 * tl.where({x} > 0.0, {x}, 1.6732632423543772 * (tl.exp({x}) - 1.0))",
    30: "tl.minimum(tl.maximum({x} + 3.0, 0.0), 6.0) / 6.0",
    31: "tl.where({x} == 0.0, 0.0, {x} * tl.log({y}))",
}


def _op_chain() -> str:
    """The generic kernel's `r = op(x, y)` for every OP, written from OP_EXPR so that the generic
    kernel and the fused ones compute each op with the same expression (smooth_l1 last, as the else)."""
    lines = []
    for k, expr in OP_EXPR.items():
        if k != SMOOTH_L1:
            lines.append(f"    {'if' if not lines else 'elif'} OP == {k}:\n        r = "
                         + expr.format(x="x", y="y", a="alpha", b="beta"))
    otherwise = OP_EXPR[SMOOTH_L1].format(x="x", y="y", a="alpha")
    lines.append(f"    else:  # smooth_l1(x - y, beta=alpha)\n        r = {otherwise}")
    return "\n".join(lines) + "\n"


EW_SOURCE = EW_SOURCE.replace("# @BLOCK@\n", inspect.getsource(_kb_block)).replace("    # @OPS@\n", _op_chain())


# -- the source pieces ---------------------------------------------------------------------------

def starter_pieces(kernel_type: str) -> tuple[str, dict]:
    """The starter's source without its KERNEL_TYPE/BACKEND/SEARCH_SPACE lines, and its space."""
    from autokernel.kernels import starter_path

    src = starter_path(kernel_type, "triton").read_text()
    tree = ast.parse(src)
    space, drop = {}, []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name == "SEARCH_SPACE":
                space = ast.literal_eval(node.value)
                drop.append((node.lineno, node.end_lineno))
            elif name in ("KERNEL_TYPE", "BACKEND"):
                drop.append((node.lineno, node.end_lineno))
        elif isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) \
                and isinstance(node.value.value, str) and node is tree.body[0]:
            drop.append((node.lineno, node.end_lineno))  # the module docstring
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
    keep = [ln for i, ln in enumerate(lines, 1) if not any(a <= i <= b for a, b in drop)]
    return "\n".join(keep), space


_SHARED = {"launch", "cdiv", "next_power_of_2"}  # the launcher's names: one copy for both starters


def prefixed_starter(kernel_type: str, prefix: str) -> tuple[str, dict]:
    """A second starter in the same file (flash attention next to the matmul starter): every
    module-level name it defines renamed with `prefix`, so its constants, kernels and kernel_fn
    do not collide with the first's; its tunables under the new names."""
    import io
    import tokenize

    src, space = starter_pieces(kernel_type)
    tree = ast.parse(src)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    names -= _SHARED
    out, prev = [], None
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.NAME and tok.string in names and not (prev is not None and prev.string == "."):
            tok = tok._replace(string=prefix + tok.string)
        out.append(tok)
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            prev = tok
    return tokenize.untokenize(out), {prefix + k: v for k, v in space.items()}


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
