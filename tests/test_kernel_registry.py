"""The kernel-type registry: every registered type is complete (spec, reference, starters, hooks,
notes), the modules that act per type name none, and a type registered at run time from its own
package is profiled and plugged into a model without touching any other file."""

from __future__ import annotations

import ast
import importlib
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import autokernel
from autokernel.kernelfile import read_kernel_file
from autokernel.kernels import KERNEL_TYPES, get_spec, kernel_types, registry, starter_path
from autokernel.kernels.hooks import Hooks
from autokernel.kernels.spec import KernelSpec
from autokernel.models import load_model
from autokernel.plug import plugged
from autokernel.profile import module_kernel_type, op_types, profile_model

PKG = Path(autokernel.__file__).resolve().parent


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_every_type_has_its_folder_complete(kernel_type):
    folder = registry.folder(kernel_type)
    assert folder == PKG / "kernels" / kernel_type
    spec = get_spec(kernel_type)
    assert isinstance(spec, KernelSpec) and spec.name == kernel_type
    assert spec.reference is registry.package(kernel_type).reference
    assert spec.shape_of is not None and spec.small_shapes and spec.default_shapes
    assert starter_path(kernel_type, "triton").is_file()
    for backend in ("triton", "cuda"):  # a CUDA starter is optional; where there is one, it is complete
        if not starter_path(kernel_type, backend).is_file():
            continue
        kf = read_kernel_file(starter_path(kernel_type, backend))
        assert (kf.kernel_type, kf.backend) == (kernel_type, backend)
        assert kf.search_space, f"{kernel_type} {backend} starter declares no SEARCH_SPACE"
    assert registry.notes(kernel_type)
    hooks = registry.hooks(kernel_type)
    assert isinstance(hooks, Hooks) and type(hooks) is not Hooks
    # profile sees it (an aten op, a module or a wrapped function) and plug puts it somewhere
    kind = type(hooks)
    assert hooks.aten_ops or kind.claims_module is not Hooks.claims_module or kind.instrument is not Hooks.instrument
    assert kind.plug_module is not Hooks.plug_module or kind.plug is not Hooks.plug


def test_registry_lists_the_folders_and_profile_reads_every_types_ops():
    folders = {p.parent.name for p in (PKG / "kernels").glob("*/__init__.py")}
    assert folders == set(KERNEL_TYPES) == set(kernel_types())
    ops = op_types()
    for t in KERNEL_TYPES:
        for op in registry.hooks(t).aten_ops:
            assert ops[op] == t  # one type per aten op
    assert sum(len(registry.hooks(t).aten_ops) for t in KERNEL_TYPES) == len(ops)
    with pytest.raises(KeyError, match="unknown kernel type 'no_such_type'"):
        get_spec("no_such_type")
    with pytest.raises(ValueError, match="built-in"):
        registry.register("matmul", "elsewhere")


TYPE_NAMES = set(KERNEL_TYPES)


def _type_literals(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in TYPE_NAMES}


def test_modules_acting_per_type_name_no_type():
    """The registry is the only list: plug, ops, verify, extract and apply name no kernel type;
    profile names only matmul and fused_mlp, for the GEMM time it reports inside other entries."""
    for name in ("plug.py", "ops.py", "verify.py", "extract.py", "apply_model.py", "dispatch.py"):
        assert _type_literals(PKG / name) == set(), name
    assert _type_literals(PKG / "profile.py") == {"matmul", "fused_mlp"}


FAKE_SPEC = '''
import torch

from autokernel.kernels.spec import KernelSpec, randn


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.special.entr(x)


def make_inputs(s, dtype, device, gen=None, scale="normal"):
    return (randn((s["rows"], s["cols"]), dtype, device, gen, scale),)


def shape_of(x, *rest):
    return {"rows": x.shape[0], "cols": x.shape[1]}


SPEC = KernelSpec(
    name="entr_fake", description="torch.special.entr, registered by a test", shape_keys=("rows", "cols"),
    make_inputs=make_inputs,
    reference=reference, shape_of=shape_of, flops=lambda s, d: 8.0 * s["rows"] * s["cols"],
    bytes=lambda s, d: 8.0 * s["rows"] * s["cols"], default_shapes=[{"rows": 64, "cols": 64}],
    small_shapes=[{"rows": 4, "cols": 8}], edge_shapes=[{"rows": 1, "cols": 1}])
'''

FAKE_HOOKS = '''
from autokernel.kernels.hooks import Hooks, flat_forward, rows_last


class EntrHooks(Hooks):
    aten_ops = ("aten::special_entr",)

    def op_shape(self, op, shapes):
        return rows_last(shapes[0])

    def claims_module(self, m):
        return type(m).__name__ == "Entropy"

    def plug_module(self, m, route):
        return flat_forward(route, m, lambda mm: ()) if type(m).__name__ == "Entropy" else None


HOOKS = EntrHooks()
'''

FACTORY = '''
import torch
from torch import nn

class Entropy(nn.Module):
    def forward(self, p):
        return torch.special.entr(p)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 40)
        self.act = Entropy()
    def forward(self, x):
        return torch.special.entr(self.act(self.proj(x).sigmoid()) * 2.0)

def make():
    torch.manual_seed(0)
    return Net(), (torch.randn(2, 3, 16),)
'''


@pytest.fixture
def entr_fake(tmp_path, monkeypatch):
    pkg = tmp_path / "fake_types" / "entr_fake"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text(textwrap.dedent(FAKE_SPEC))
    (pkg / "hooks.py").write_text(textwrap.dedent(FAKE_HOOKS))
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.register("entr_fake", "fake_types.entr_fake")
    yield tmp_path
    registry.unregister("entr_fake")
    assert "entr_fake" not in kernel_types()
    for name in [m for m in sys.modules if m.split(".")[0] == "fake_types"]:  # the next test's are new files
        del sys.modules[name]


def test_a_type_registered_from_its_own_package_is_profiled_and_plugged(entr_fake):
    assert kernel_types()[-1] == "entr_fake" and get_spec("entr_fake").name == "entr_fake"
    assert op_types()["aten::special_entr"] == "entr_fake"
    f = entr_fake / "net.py"
    f.write_text(FACTORY)
    bundle = load_model(f"{f}:make", device="cpu")
    r = profile_model(bundle, warmup=1, iters=2)
    assert module_kernel_type(bundle.model.act) == "entr_fake"
    e = r.entry("entr_fake")
    # the Entropy module (a range) and the entr call outside it (aten::special_entr): two calls of 6x40
    assert e is not None and e["calls"] == 2 and e["shapes"] == [{"rows": 6, "cols": 40}]
    assert r.entry("matmul")["shapes"] == [{"M": 6, "N": 40, "K": 16}]

    seen = []

    def entr_kernel(x):
        seen.append(tuple(x.shape))
        return torch.special.entr(x)

    with torch.inference_mode():
        ref = bundle.forward()
        with plugged(bundle.model, {"entr_fake": entr_kernel}) as rep:
            out = bundle.forward()
            assert rep.sites == {"entr_fake": 1} and rep.calls == {"entr_fake": 1}
        assert not bundle.model.act.__dict__.get("forward")  # restored
    assert seen == [(6, 40)] and torch.equal(out, ref)


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_a_types_kb_part_is_found_by_the_kb_through_the_registry(kernel_type):
    """A type's KB compiler part (kb_rules.RULE and its kb_helper.py template), where it has one,
    is what the kb's rules and solution files use; no kb module names the types it knows."""
    from autokernel.kb.op_rules import library_rules
    from autokernel.kb.rule_base import LibraryRule
    from autokernel.kb.starter_source import helper_template

    folder = registry.folder(kernel_type)
    rule = registry.kb_rule(kernel_type)
    assert (rule is not None) == (folder / "kb_rules.py").is_file() == (folder / "kb_helper.py").is_file()
    if rule is None:
        assert kernel_type not in library_rules()
        return
    assert isinstance(rule, LibraryRule) and rule.kernel_type == kernel_type and library_rules()[kernel_type] is rule
    body = helper_template(kernel_type).body
    assert "\ndef _kb_" in body and "import " not in body
    kinds = type(rule)  # it finds its op by name or by pattern, and writes a call of its helpers
    assert rule.calls or kinds.finds is not LibraryRule.finds
    assert any(getattr(kinds, m) is not getattr(LibraryRule, m) for m in ("pattern_call", "module_call", "function_call"))


def test_kb_rules_and_driver_name_no_kernel_type():
    """The KB compiler's rules and driver ask the registry for the types' rules and helpers."""
    for name in ("op_rules.py", "rule_base.py", "starter_source.py", "trace.py", "norm_rewrites.py"):
        assert _type_literals(PKG / "kb" / name) == set(), name
    assert _type_literals(PKG / "kb" / "solutions.py") == {"reduce"}  # a fused group's key, not the type


FAKE_STARTER = '''
"""torch.special.entr of a tensor, elementwise: the fake type's starter."""

import torch
import triton
import triton.language as tl

from autokernel.kernels.launcher import cdiv, launch, next_power_of_2  # a starter brings the launch path

KERNEL_TYPE = "entr_fake"
BACKEND = "triton"

BLOCK = 256


@triton.jit
def entr_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
    tl.store(y_ptr + offs, -x * tl.log(x), mask=offs < n)


def kernel_fn(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    launch(entr_kernel, (cdiv(x.numel(), BLOCK),), x, y, x.numel(), BLOCK=BLOCK)
    return y


SEARCH_SPACE = {"BLOCK": [128, 256]}
'''

FAKE_KB_RULES = '''
import torch

from autokernel.kb.rule_base import LibraryRule


class EntrRule(LibraryRule):
    def finds(self, gm, node):
        return self.kernel_type if node.op == "call_function" and node.target is torch.special.entr else None

    def pattern_call(self, rules, node):
        return f"_kb_entr({rules.fmt(node.args[0])})" if self.finds(rules.gm, node) else None


RULE = EntrRule("entr_fake")
'''

FAKE_KB_HELPER = '''
from fake_types.entr_fake.triton_starter import kernel_fn


def _kb_entr(x):
    return kernel_fn(x)
'''

ENTR_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.special.entr(torch.sigmoid(x))


def get_inputs():
    return [torch.randn(3, 50)]


def get_init_inputs():
    return []
'''


def test_a_registered_types_kb_part_gives_a_kernelbench_problem_its_starter(entr_fake):
    """The KB compiler finds a type registered at run time through the registry: its rule takes the
    problem's main op, the solution file carries its starter and helper, and ModelNew computes Model."""
    from autokernel.kb.problems import Problem, load_source
    from autokernel.kb.solutions import KIND_LIBRARY, initial_solution

    pkg = entr_fake / "fake_types" / "entr_fake"
    for name, text in (("triton_starter.py", FAKE_STARTER), ("kb_rules.py", FAKE_KB_RULES),
                       ("kb_helper.py", FAKE_KB_HELPER)):
        (pkg / name).write_text(textwrap.dedent(text).lstrip())
    importlib.invalidate_caches()
    sol = initial_solution(Problem("checkout", 1, 1, "entr_fake_test", ENTR_PROBLEM))
    assert (sol.kind, sol.library) == (KIND_LIBRARY, "entr_fake"), sol.describe()
    assert "def _kb_entr(x):" in sol.source and "def entr_kernel(" in sol.source and "import fake_types" not in sol.source
    mod = load_source(sol.source, "kb_entr_fake_test")
    x = mod.get_inputs()[0]
    torch.testing.assert_close(mod.ModelNew()(x), mod.Model()(x))
