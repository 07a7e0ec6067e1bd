"""Groups of a problem's elementwise ops generated as one Triton kernel each: which nodes form a
group (a node joins its only user when that user is elementwise too, of the same shape and dtype),
how each input is indexed (the whole shape, a row, a column, a run of dims, a run-time scalar),
and the kernel and launcher written for a group, which can also reduce the group's result to its
mean or sum (a loss). solutions.py's emitter calls these.
"""

from __future__ import annotations

from autokernel.kb.fx_nodes import node_shape
from autokernel.kb.elementwise import EW_OPS
from autokernel.kb.templates.elementwise import _kb_block


def fused_kernel(gid: int | str, g: dict, ew: dict) -> str:
    """One Triton kernel computing a group of elementwise ops in registers (one read of each
    input, one write), and its launcher, named _kb_fused_{gid}."""
    from torch import fx

    var = {}
    loads, blocks = [], []
    for k, (node, mode) in enumerate(g["inputs"]):
        if mode == "scalar":  # a run-time Python number: the kernel argument itself
            var[node] = f"p{k}"
            continue
        var[node] = f"a{k}"
        if mode == "block":
            blocks.append(k)
        index = {"full": "offs", "row": "offs % ncols", "col": "offs // ncols",
                 "block": f"_kb_bidx(base, i{k}, s{k}, BLOCK)"}[mode]
        loads.append(f"    a{k} = tl.load(p{k} + {index}, mask=mask, other=1.0).to(tl.float32)")
    steps = []
    for k, m in enumerate(g["members"]):
        op, x, y, alpha, beta = ew[m]
        a = var[alpha] if isinstance(alpha, fx.Node) else repr(alpha)
        xs = var[x]
        ys = var[y] if y is not None else a
        steps.append(f"    t{k} = {EW_OPS[op].expr.format(x=xs, y=ys, a=a, b=repr(beta))}")
        var[m] = f"t{k}"
    n_in = len(g["inputs"])
    ptrs = ", ".join(f"p{k}" for k in range(n_in))
    xs = ", ".join(f"x{k}" for k in range(n_in))
    full = next(k for k, (_n, mode) in enumerate(g["inputs"]) if mode == "full")
    dtype = str(g["root"].meta["tensor_meta"].dtype)
    conts = ", ".join(f"float(x{k})" if mode == "scalar" else f"x{k}.contiguous()"
                      for k, (_n, mode) in enumerate(g["inputs"]))
    ops = ' -> '.join(describe(m) for m in g['members'])
    last = f"t{len(g['members']) - 1}"
    # a block input (a bias of [C, 1, 1]) is indexed by (offs // inner) % size, both from the
    # shapes at run time
    kargs = "".join(f"i{k}, s{k}, " for k in blocks)
    start = ("base = tl.program_id(0).to(tl.int64) * BLOCK\n    offs = base + tl.arange(0, BLOCK)" if blocks
             else "offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)")
    largs = "".join(f"*_kb_block(x{full}.shape, x{k}.shape), " for k in blocks)
    head = (f"\n\n@triton.jit\ndef _kb_fused_{gid}_kernel({ptrs}, out_ptr, n, ncols, {kargs}BLOCK: tl.constexpr):\n"
            f"    {start}\n    mask = offs < n\n" + "\n".join(loads) + "\n" + "\n".join(steps) + "\n")
    if g.get("reduce"):
        # fp32 partial sums of the unrounded values; the starter's row sum scales once and
        # rounds once, as torch's mean does
        scale = "(1.0 / n if n else float('nan'))" if g["reduce"] == "mean" else "1.0"
        return (head + f"    tl.store(out_ptr + tl.program_id(0), tl.sum(tl.where(mask, {last}, 0.0), axis=0))\n\n\n"
                f"def _kb_fused_{gid}({xs}):\n"
                f"    \"\"\"{ops}, fused in one kernel, then the {g['reduce']} of all of it.\"\"\"\n"
                f"    n = x{full}.numel()\n"
                f"    partial = torch.empty((1, cdiv(n, EW_BLOCK)), device=x{full}.device, dtype=torch.float32)\n"
                f"    if n:\n"
                f"        launch(_kb_fused_{gid}_kernel, (partial.shape[1],), {conts}, partial, n, x{full}.shape[-1], {largs}"
                f"BLOCK=EW_BLOCK, num_warps=EW_WARPS)\n"
                f"    return _row_sums(partial, {scale}).reshape(()).to({dtype})\n")
    return (head + f"    tl.store(out_ptr + offs, {last}.to(out_ptr.dtype.element_ty), mask=mask)\n\n\n"
            f"def _kb_fused_{gid}({xs}):\n"
            f"    \"\"\"{ops}, fused in one kernel.\"\"\"\n"
            f"    out = torch.empty(x{full}.shape, device=x{full}.device, dtype={dtype})\n"
            f"    n = out.numel()\n    if n == 0:\n        return out\n"
            f"    launch(_kb_fused_{gid}_kernel, (cdiv(n, EW_BLOCK),), {conts}, out, n, x{full}.shape[-1], {largs}"
            f"BLOCK=EW_BLOCK, num_warps=EW_WARPS)\n    return out\n")


def fusion_groups(ew: dict, singles: set = frozenset()) -> dict:
    """Groups of elementwise nodes computed in one kernel: a node joins its only user when that
    user is elementwise too and of the same shape and dtype. Each group's inputs are tensors of
    the root's shape ("full"), rows broadcast along the last dim ("row": [N] or [1, .., N]),
    columns ("col": [..., 1]) or a run of dims ("block": a [C, 1, 1] bias of an NCHW tensor, a
    one-element tensor); a group with any other input, a non-finite scalar, or fewer than two
    ops is not fused (its ops stay one kernel each), unless it is one of `singles` (a node whose
    kernel also reduces it). A run-time Python number (alpha given as a node) is a "scalar" input:
    a kernel argument, not a load."""
    import math

    from torch import fx

    def same(a, b) -> bool:
        return node_shape(a) == node_shape(b) and a.meta["tensor_meta"].dtype == b.meta["tensor_meta"].dtype

    parent = {}
    for node in ew:
        users = list(node.users)
        if len(users) == 1 and users[0] in ew and same(node, users[0]):
            parent[node] = users[0]
    roots = [n for n in ew if n not in parent]
    groups = {}
    for root in roots:
        members = [n for n in ew if _root_of(n, parent) is root]  # graph order = a valid order
        if len(members) < 2 and root not in singles:
            continue
        shape = node_shape(root)
        if not shape:
            continue
        inputs, ok = [], True
        for m in members:
            op, x, y, alpha, beta = ew[m]
            if not all(isinstance(v, fx.Node) or math.isfinite(v) for v in (alpha, beta)):
                ok = False
            for operand in (x, y, alpha):
                if not isinstance(operand, fx.Node) or operand in members or any(operand is i for i, _ in inputs):
                    continue
                s = node_shape(operand)
                if operand is alpha:
                    mode = "scalar"
                elif s == shape:
                    mode = "full"
                elif s is not None and len(s) >= 1 and s[-1] == shape[-1] and all(d == 1 for d in s[:-1]) \
                        and len(s) <= len(shape):
                    mode = "row"
                elif s is not None and s == shape[:-1] + (1,):
                    mode = "col"
                elif s is not None and _kb_block(shape, s):
                    mode = "block"
                else:
                    ok = False
                    break
                inputs.append((operand, mode))
        if ok and any(mode == "full" for _i, mode in inputs):
            groups[root] = {"root": root, "members": members, "inputs": inputs}
    return groups


def _root_of(node, parent: dict):
    while node in parent:
        node = parent[node]
    return node


def describe(node) -> str:
    if node.op == "call_module":
        return type(node.graph.owning_module.get_submodule(node.target)).__name__
    if node.op == "call_method":
        return f".{node.target}"
    return getattr(node.target, "__name__", str(node.target))
