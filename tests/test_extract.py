"""Extract into a real store and a real git workspace: branches from starters, shapes, idempotency."""

from __future__ import annotations

import json

import pytest

from autokernel.errors import NotFoundError
from autokernel.extract import extract, kernel_name, kernel_shapes
from autokernel.kernels import starter_path
from autokernel.store import Store
from autokernel.workspace import Workspace

# a profile as profile_model writes it (types whose Triton starters exist, plus one without)
ENTRIES = [
    {"kernel_type": "matmul", "label": "aten::linear", "gpu_ms": 5.0, "share": 0.5, "calls": 9,
     "shapes": [{"M": 32, "N": 64, "K": 64}, {"M": 32, "N": 1000, "K": 64}], "weights": [8, 1],
     "dtype": "bfloat16", "amdahl": 2.0, "gemm_ms": 0.0},
    {"kernel_type": "fused_mlp", "label": "LlamaMLP", "gpu_ms": 3.0, "share": 0.3, "calls": 2,
     "shapes": [{"tokens": 32, "hidden": 64, "ffn": 128}], "weights": [2], "dtype": "bfloat16", "amdahl": 1.43,
     "gemm_ms": 2.9},
    {"kernel_type": "flash_attention", "label": "attention (sdpa)", "gpu_ms": 1.0, "share": 0.1, "calls": 2,
     "shapes": [{"batch": 1, "heads": 4, "kv_heads": 2, "seq": 32, "head_dim": 16, "causal": 1}], "weights": [2],
     "dtype": "bfloat16", "amdahl": 1.11, "gemm_ms": 0.0},
    {"kernel_type": "rotary_embedding", "label": "apply_rotary_pos_emb", "gpu_ms": 0.5, "share": 0.05, "calls": 2,
     "shapes": [{"batch": 1, "heads": 4, "seq": 32, "head_dim": 16}], "weights": [2], "dtype": "bfloat16",
     "amdahl": 1.05, "gemm_ms": 0.0},
    {"kernel_type": "other", "label": "aten::add", "gpu_ms": 0.5, "share": 0.05, "calls": 0, "shapes": [],
     "weights": [], "dtype": "bfloat16", "amdahl": 1.05, "gemm_ms": 0.0},
]


@pytest.fixture
def env(home):
    store = Store(home.db)
    ws = Workspace.open(home)
    yield store, ws
    store.close()


def test_extract_creates_branches_from_starters_with_real_shapes(env):
    store, ws = env
    prof = store.add_profile("llama-tiny", ENTRIES, config={"batch": 1, "seq": 32})
    kernels = extract(store, ws, top=3)
    assert [k.name for k in kernels] == ["llama-tiny.matmul", "llama-tiny.fused_mlp", "llama-tiny.flash_attention"]
    for k, e in zip(kernels, ENTRIES):
        assert (k.kernel_type, k.backend, k.model, k.profile_id) == (e["kernel_type"], "triton", "llama-tiny", prof.id)
        assert k.share == e["share"] and k.dtype == "bfloat16"
        assert ws.has_kernel(k.name) and k.branch == ws.branch_name(k.name)
        assert k.base_commit == ws.head(k.name)
        assert ws.read(k.name) == starter_path(k.kernel_type).read_text()
        assert json.loads(k.shapes_json) == {"shapes": e["shapes"], "weights": e["weights"]}
        assert kernel_shapes(k) == (e["shapes"], e["weights"])
    assert not store.find_kernel("llama-tiny.rotary_embedding")  # beyond --top
    assert not store.find_kernel("llama-tiny.other")  # never extracted


def test_re_extract_is_idempotent_and_follows_a_newer_profile(env):
    store, ws = env
    store.add_profile("llama-tiny", ENTRIES)
    first = extract(store, ws, top=5)
    heads = {k.name: ws.head(k.name) for k in first}
    assert len(first) == 4
    newer = [dict(e) for e in ENTRIES]
    newer[0] = {**newer[0], "share": 0.6, "shapes": [{"M": 64, "N": 64, "K": 64}], "weights": [3]}
    p2 = store.add_profile("llama-tiny", newer)
    again = extract(store, ws, top=5)
    assert [k.id for k in again] == [k.id for k in first]
    assert len(store.list_kernels()) == 4 and sorted(ws.kernels()) == sorted(heads)
    assert {k.name: ws.head(k.name) for k in again} == heads  # history untouched
    mm = store.get_kernel("llama-tiny.matmul")
    assert mm.share == 0.6 and mm.profile_id == p2.id and kernel_shapes(mm) == ([{"M": 64, "N": 64, "K": 64}], [3])


def test_other_backend_gets_its_own_name_and_missing_starters_are_reported(env):
    store, ws = env
    store.add_profile("llama-tiny", ENTRIES)
    skipped = []
    cuda = extract(store, ws, top=4, backend="cuda", on_skip=lambda n, why: skipped.append(n))
    for k in cuda:
        assert k.name == kernel_name("llama-tiny", k.kernel_type, "cuda") == f"llama-tiny.{k.kernel_type}.cuda"
        assert k.backend == "cuda" and ws.read(k.name) == starter_path(k.kernel_type, "cuda").read_text()
    made = {k.kernel_type for k in cuda}
    expected = {e["kernel_type"] for e in ENTRIES[:4] if starter_path(e["kernel_type"], "cuda").is_file()}
    assert made == expected
    assert sorted(skipped) == sorted(f"llama-tiny.{t}.cuda" for t in {e["kernel_type"] for e in ENTRIES[:4]} - expected)
    triton = extract(store, ws, top=1)
    assert triton[0].name == "llama-tiny.matmul" and triton[0].id not in {k.id for k in cuda}


def test_extract_without_a_profile_says_what_to_do(env):
    store, ws = env
    with pytest.raises(NotFoundError, match="no profile"):
        extract(store, ws)
    with pytest.raises(NotFoundError):
        extract(store, ws, profile_id=99)


def test_profile_then_extract_commands(home, run_cli):
    code, out, err = run_cli("profile", "--model", "llama-tiny", "--seq", "8", "--warmup", "1", "--iters", "1")
    assert code == 0, err
    code, out, err = run_cli("extract", "--top", "5", "--json")
    assert code == 0, err
    data = json.loads(out)
    names = {k["name"] for k in data["kernels"]} | {s["name"] for s in data["skipped"]}
    assert {"llama-tiny.matmul", "llama-tiny.fused_mlp", "llama-tiny.flash_attention"} <= names
    mlp = next(k for k in data["kernels"] if k["kernel_type"] == "fused_mlp")
    assert mlp["shapes"] == [{"tokens": 8, "hidden": 64, "ffn": 128}] and mlp["weights"] == [2]
    code, out2, err = run_cli("extract", "--top", "5", "--json")
    assert code == 0 and [k["id"] for k in json.loads(out2)["kernels"]] == [k["id"] for k in data["kernels"]]
    code, out, err = run_cli("extract", "--profile", "42")
    assert code == 7 and "profile 42" in err
