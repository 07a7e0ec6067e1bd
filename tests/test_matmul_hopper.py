"""The Hopper GEMM work of issue 20: the matmul starter's persistent variant (TMA descriptors made on
the device or the host, flattened / warp-specialized / plain loops, epilogue subtiling, fp32 with
exact products), its per-shape table, the fused_mlp starter's persistent gate/up (SiLU*mul
epilogue) and down kernels, and benchmarks/gemm_hopper.py (CPU smoke run, resume, applying its
choice). Under the interpreter (fp16 and fp32: its bf16 dots are wrong) and, without a GPU, a full
compile of every benchmark candidate for sm_90a."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import triton

from autokernel.declared import effective_names
from autokernel.kernelfile import import_kernel, read_kernel_file, with_config
from autokernel.kernels import starter_path
from support.kernel_cases import CPU_DTYPES, HAS_CUDA, Kernel
from support.sm90_compile import compile_sm90, job

ROOT = Path(__file__).resolve().parents[1]
MM = Kernel("matmul")
MLP = Kernel("fused_mlp")


def _bench():
    spec = importlib.util.spec_from_file_location("gemm_hopper_bench", ROOT / "benchmarks" / "gemm_hopper.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load(kernel: Kernel, config: dict, tmp_path: Path, name: str = "k"):
    """The starter with `config` written in (values may be dicts: PERSISTENT_SHAPES)."""
    path = tmp_path / f"{kernel.name}_{name}.py"
    path.write_text(with_config(starter_path(kernel.name, "triton").read_text(), config))
    return import_kernel(read_kernel_file(path))


def _spy(mod, monkeypatch, names):
    """Records (kernel name, grid, launch keywords) of each launch of `names`, then launches."""
    seen = []

    class Spy:
        def __init__(self, name, real):
            self.name, self.real = name, real

        def __getitem__(self, grid):
            def run(*args, **kw):
                seen.append((self.name, tuple(grid), kw))
                return self.real[grid](*args, **kw)
            return run

    for name in names:
        monkeypatch.setattr(mod, name, Spy(name, getattr(mod, name)))
    return seen


SMALL_TILES = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 2, "FP32_BLOCK_M": 32, "FP32_BLOCK_N": 64,
               "FP32_BLOCK_K": 16, "SPLIT_K": "off"}
PERSISTENT = {"VARIANT": "persistent", "FP32_VARIANT": "persistent"}


@pytest.mark.parametrize("variant", [
    {"PERSISTENT_LOOP": "flatten", "EPILOGUE_SUBTILE": 2, "TMA_DESC": "device"},
    {"PERSISTENT_LOOP": "plain", "EPILOGUE_SUBTILE": 4, "TMA_DESC": "host"},
    {"PERSISTENT_LOOP": "flatten", "EPILOGUE_SUBTILE": 1, "TMA_DESC": "host", "FP32_PRECISION": "tf32x3"},
    # the fp32 half cannot be warp-specialized (valid_config): fp32 stays on the pointer kernel there
    {"PERSISTENT_LOOP": "warp_specialize", "EPILOGUE_SUBTILE": 1, "TMA_DESC": "device", "NUM_WARPS": 4,
     "FP32_VARIANT": "pointer"},
], ids=["flatten-device-sub2", "plain-host-sub4", "flatten-host-tf32x3", "warp_specialize"])
def test_persistent_variant_matches_the_reference(tmp_path, monkeypatch, variant):
    """Ragged M, N and K (TMA zero-fills and clips), more tiles than programs (3 under the
    interpreter, so each walks several in the grouped order), both B layouts, fp16 and fp32 (exact
    ieee products by default, fp32's 1e-4 tolerance)."""
    cfg = {**SMALL_TILES, **PERSISTENT, **variant}
    mod = _load(MM, cfg, tmp_path)
    assert mod.valid_config(dict(MM.kernel_file("triton").config, **cfg))
    gen = MM.gen(41)
    for dtype in CPU_DTYPES:
        seen = _spy(mod, monkeypatch, ["_matmul_persistent_kernel", "_matmul_tile_kernel"])
        for shape in ({"M": 100, "N": 72, "K": 136}, {"M": 37, "N": 200, "K": 40}):
            a, b = MM.make(shape, dtype, gen)
            for bb in (b, b.contiguous()):
                MM.check(mod.kernel_fn(a, bb), (a, bb), dtype)
        monkeypatch.undo()
        persistent = dtype != torch.float32 or cfg["FP32_VARIANT"] == "persistent"
        assert [name for name, _, _ in seen] == ["_matmul_persistent_kernel" if persistent
                                                 else "_matmul_tile_kernel"] * 4
        if not persistent:
            continue
        for _, grid, kw in seen:
            assert grid == (3,) and kw["PROGRAMS"] == 3  # 8 or more tiles walked by 3 programs
            assert kw["HOST_DESC"] == (variant["TMA_DESC"] == "host")
            assert kw["FLATTEN"] == (variant["PERSISTENT_LOOP"] == "flatten")
            assert kw["WARP_SPEC"] == (variant["PERSISTENT_LOOP"] == "warp_specialize")
            assert kw["PRECISION"] == (cfg.get("FP32_PRECISION", "ieee") if dtype == torch.float32 else None)


def test_persistent_variant_falls_back_where_tma_cannot_describe(tmp_path, monkeypatch):
    """K = 43 in fp16: A's rows are 86 bytes apart, not 16-byte aligned, and PAD_UNALIGNED "as_is"
    keeps them so: the pointer kernel computes it, correctly."""
    mod = _load(MM, dict(SMALL_TILES, **PERSISTENT, PAD_UNALIGNED="as_is"), tmp_path)
    seen = _spy(mod, monkeypatch, ["_matmul_persistent_kernel", "_matmul_tile_kernel"])
    a, b = MM.make({"M": 50, "N": 64, "K": 43}, torch.float16, MM.gen(42))
    MM.check(mod.kernel_fn(a, b), (a, b), torch.float16)
    assert [name for name, _, _ in seen] == ["_matmul_tile_kernel"]


def test_per_shape_table_overrides_the_tunables_at_its_shapes(tmp_path, monkeypatch):
    """A PERSISTENT_SHAPES entry (M rounded up to a power of two) decides the variant and tiles at
    its shape; other shapes, fp32, and SHAPE_CONFIGS "off" keep the module's tunables."""
    entry = {"VARIANT": "persistent", "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "NUM_WARPS": 4,
             "NUM_STAGES": 3, "EPILOGUE_SUBTILE": 2, "PERSISTENT_LOOP": "plain", "TMA_DESC": "host"}
    table = {"64x72x136": entry}
    base = dict(SMALL_TILES, PERSISTENT_SHAPES=table, TABLE_BASE=_table_base(SMALL_TILES))
    for shape_configs, expect in (("table", "_matmul_persistent_kernel"), ("off", "_matmul_tile_kernel")):
        mod = _load(MM, dict(base, SHAPE_CONFIGS=shape_configs), tmp_path, shape_configs)
        assert mod.shape_key(40, 72, 136) == "64x72x136" and mod.shape_key(64, 72, 136) == "64x72x136"
        seen = _spy(mod, monkeypatch, ["_matmul_persistent_kernel", "_matmul_tile_kernel"])
        gen = MM.gen(43)
        a, b = MM.make({"M": 40, "N": 72, "K": 136}, torch.float16, gen)
        MM.check(mod.kernel_fn(a, b), (a, b), torch.float16)
        assert seen[-1][0] == expect
        if expect == "_matmul_persistent_kernel":
            kw = seen[-1][2]
            assert (kw["BM"], kw["BN"], kw["GROUP"], kw["SUBTILE"], kw["HOST_DESC"]) == (32, 32, 4, 2, True)
        a, b = MM.make({"M": 40, "N": 72, "K": 136}, torch.float32, gen)  # the table is 16-bit only
        MM.check(mod.kernel_fn(a, b), (a, b), torch.float32)
        a, b = MM.make({"M": 200, "N": 72, "K": 136}, torch.float16, gen)  # another M bucket
        MM.check(mod.kernel_fn(a, b), (a, b), torch.float16)
        assert [name for name, _, _ in seen[-2:]] == ["_matmul_tile_kernel"] * 2


def _table_base(config: dict) -> dict:
    """TABLE_BASE for the starter with `config` written in: its 16-bit tunables as they then are."""
    mod = import_kernel(MM.kernel_file("triton"))
    return {k: config.get(k, v) for k, v in mod.TABLE_BASE.items()}


def test_a_tunable_moved_from_the_table_base_applies_on_top_of_the_entry(tmp_path, monkeypatch):
    """The search's move of one tunable is an experiment at the table's shapes too: the entry decides
    the tunables still at their TABLE_BASE value, the moved one keeps the module's; a mix
    valid_config rejects leaves the entry alone."""
    entry = {"VARIANT": "persistent", "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "NUM_WARPS": 4,
             "NUM_STAGES": 3, "EPILOGUE_SUBTILE": 2, "PERSISTENT_LOOP": "plain", "TMA_DESC": "host"}
    base = dict(SMALL_TILES, PERSISTENT_SHAPES={"64x72x136": entry}, TABLE_BASE=_table_base(SMALL_TILES))
    moved = _load(MM, dict(base, GROUP_M=8), tmp_path, "moved")
    cfg = moved.call_config(torch.float16, 40, 72, 136)
    assert cfg["GROUP_M"] == 8 and all(cfg[k] == v for k, v in entry.items() if k != "GROUP_M")
    assert moved.call_config(torch.float16, 200, 72, 136)["BLOCK_M"] == SMALL_TILES["BLOCK_M"]  # not in the table
    seen = _spy(moved, monkeypatch, ["_matmul_persistent_kernel", "_matmul_tile_kernel"])
    a, b = MM.make({"M": 40, "N": 72, "K": 136}, torch.float16, MM.gen(44))
    MM.check(moved.kernel_fn(a, b), (a, b), torch.float16)
    assert seen[-1][0] == "_matmul_persistent_kernel" and seen[-1][2]["GROUP"] == 8
    # 4 stages of 256 x 128 tiles on top of the entry's 32 x 32: past the shared memory, so the entry decides
    big = _load(MM, dict(base, BLOCK_K=128, NUM_STAGES=5, BLOCK_M=256, BLOCK_N=256), tmp_path, "big")
    assert not big.valid_config({k: getattr(big, k) for k in big.SEARCH_SPACE})
    assert big.call_config(torch.float16, 40, 72, 136) == dict(entry, PRECISION=None)


def test_valid_config_knows_what_triton_36_builds_on_sm90():
    kf = MM.kernel_file("triton")
    mod = import_kernel(kf)
    ok = mod.valid_config

    def cfg(**kw):
        return dict(kf.config, VARIANT="persistent", BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, **kw)

    assert ok(cfg(NUM_WARPS=8, NUM_STAGES=4, EPILOGUE_SUBTILE=2))
    # the C staging buffer counts: 4 stages of 128x256x64 (192 KB) + a whole 128x256 tile (64 KB)
    assert not ok(cfg(NUM_WARPS=8, NUM_STAGES=4, EPILOGUE_SUBTILE=1))
    assert ok(cfg(NUM_WARPS=4, NUM_STAGES=3, EPILOGUE_SUBTILE=1, PERSISTENT_LOOP="warp_specialize"))
    for bad in ({"NUM_WARPS": 8}, {"EPILOGUE_SUBTILE": 2}, {"TMA_DESC": "host"}):
        base = {"NUM_WARPS": 4, "NUM_STAGES": 3, "EPILOGUE_SUBTILE": 1, "PERSISTENT_LOOP": "warp_specialize"}
        assert not ok(cfg(**dict(base, **bad))), bad
    assert not ok(dict(kf.config, FP32_VARIANT="persistent", PERSISTENT_LOOP="warp_specialize"))
    assert ok(dict(kf.config, FP32_VARIANT="persistent", PERSISTENT_LOOP="flatten"))
    narrow = dict(kf.config, VARIANT="persistent", BLOCK_N=16, EPILOGUE_SUBTILE=4)
    assert not ok(narrow) and ok(dict(narrow, EPILOGUE_SUBTILE=1))  # TMA boxes of at least 16 bytes


def test_the_search_samples_persistent_switches_only_where_they_run():
    source = starter_path("matmul", "triton").read_text()
    config = read_kernel_file(starter_path("matmul", "triton")).config
    switches = {"EPILOGUE_SUBTILE", "PERSISTENT_LOOP", "TMA_DESC"}
    assert not switches & set(effective_names(source, config, "bf16"))  # VARIANT "pointer"
    assert switches < set(effective_names(source, dict(config, VARIANT="persistent"), "bf16"))
    assert {"SHAPE_CONFIGS", "VARIANT"} < set(effective_names(source, config, "bf16"))
    fp32 = set(effective_names(source, config, "fp32"))
    assert "FP32_VARIANT" in fp32 and not ({"VARIANT", "SHAPE_CONFIGS"} | switches) & fp32
    assert switches < set(effective_names(source, dict(config, FP32_VARIANT="persistent"), "fp32"))


def test_the_search_leaves_out_paths_the_models_shapes_never_take(tmp_path, monkeypatch):
    """Given a model's shapes, no trial moves the GEMV tunables where no call has N == 1, nor
    PAD_UNALIGNED where no operand would be padded, nor split-K's sizes with SPLIT_K "off"; and the
    kernel at such shapes indeed never takes those paths (H100 run 9: 422 of matmul's 772
    candidates were the best's very program, nearly all moves of these). The persistent switches
    are searched where the per-shape table runs a model shape persistent."""
    source = starter_path("matmul", "triton").read_text()
    config = read_kernel_file(starter_path("matmul", "triton")).config
    llama = [{"M": 2048, "N": 4096, "K": 4096}, {"M": 64, "N": 2048, "K": 1}, {"M": 2048, "N": 32000, "K": 4096}]
    gemv = {"GEMV_BLOCK_M", "GEMV_BLOCK_K", "GEMV_WARPS"}
    sizes = {"SPLIT_K_PROGRAMS", "SPLIT_K_MIN_CHUNK", "SPLIT_K_BELOW_TILES"}
    names = set(effective_names(source, config, "bf16", llama))
    assert not (gemv | {"PAD_UNALIGNED"}) & names and sizes | {"SPLIT_K", "VARIANT", "BLOCK_M"} < names
    assert not sizes & set(effective_names(source, dict(config, SPLIT_K="off"), "bf16", llama))
    assert gemv < set(effective_names(source, config, "bf16", llama + [{"M": 4096, "N": 1, "K": 4096}]))
    for odd in ({"M": 2048, "N": 4096, "K": 4100}, {"M": 2048, "N": 4100, "K": 4096}):  # A's or B's rows
        assert "PAD_UNALIGNED" in effective_names(source, config, "bf16", llama + [odd])
    # PERSISTENT_SHAPES' entries run the heavy shapes persistent with VARIANT "pointer": its switches are searched
    switches = {"EPILOGUE_SUBTILE", "PERSISTENT_LOOP", "TMA_DESC"}
    assert switches < names and switches < set(effective_names(source, config, "bf16", [{"M": 1500, "N": 4096,
                                                                                         "K": 4096}]))
    for cfg, shapes in ((config, [{"M": 2048, "N": 4096, "K": 512}]), (dict(config, SHAPE_CONFIGS="off"), llama),
                        (dict(config, VARIANT="tma"), llama)):  # no entry, no table, VARIANT moved off the base
        assert not switches & set(effective_names(source, cfg, "bf16", shapes))
    everything = gemv | sizes | {"PAD_UNALIGNED"}
    assert everything < set(effective_names(source, config, "bf16"))  # shapes unknown (KernelBench)
    assert everything < set(effective_names(source, config, "bf16", [{"B": 2, "M": 8}]))  # not M, N, K

    # what the names say is what the kernel does (PAD_MIN_ELEMS 1: any unaligned operand is padded)
    mod = _load(MM, dict(SMALL_TILES, PAD_MIN_ELEMS=1), tmp_path)
    seen = _spy(mod, monkeypatch, ["_gemv_kernel"])
    aligned, copies = mod._aligned, []

    def spy_aligned(t, *args, **kw):  # records whether an operand was copied into a padded buffer
        out = aligned(t, *args, **kw)
        copies.append(isinstance(out, torch.Tensor) and out is not t)
        return out

    monkeypatch.setattr(mod, "_aligned", spy_aligned)
    src = with_config(source, dict(SMALL_TILES, PAD_MIN_ELEMS=1))
    for shape, taken in (({"M": 40, "N": 48, "K": 32}, False), ({"M": 40, "N": 1, "K": 32}, True),
                         ({"M": 40, "N": 48, "K": 40}, True)):
        seen.clear()
        copies.clear()
        a = torch.randn(shape["M"], shape["K"], dtype=torch.float16)
        b = torch.randn(shape["N"], shape["K"], dtype=torch.float16).t()  # a weight's .t(), as nn.Linear
        torch.testing.assert_close(mod.kernel_fn(a, b).float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
        names = set(effective_names(src, dict(config, **SMALL_TILES), "fp16", [shape]))
        used = bool(seen) or any(copies)
        assert used == taken and bool((gemv | {"PAD_UNALIGNED"}) & names) == taken, (shape, seen, copies)


@pytest.mark.parametrize("variant", [
    {"GU_VARIANT": "persistent", "DOWN_VARIANT": "persistent", "EPILOGUE_SUBTILE": 2, "PERSISTENT_LOOP": "flatten"},
    {"GU_VARIANT": "persistent", "DOWN_VARIANT": "pointer", "EPILOGUE_SUBTILE": 1, "PERSISTENT_LOOP": "plain"},
    {"GU_VARIANT": "persistent", "DOWN_VARIANT": "persistent", "EPILOGUE_SUBTILE": 2, "PERSISTENT_LOOP": "flatten",
     "GU_ORDER": "sequential"},
    {"GU_VARIANT": "persistent", "DOWN_VARIANT": "persistent", "EPILOGUE_SUBTILE": 2, "PERSISTENT_LOOP": "flatten",
     "GU_ORDER": "split"},
    {"GU_VARIANT": "persistent", "DOWN_VARIANT": "pointer", "EPILOGUE_SUBTILE": 1, "PERSISTENT_LOOP": "plain",
     "GU_ORDER": "split"},
], ids=["both-flatten-sub2", "gate_up-plain", "sequential", "split-sub2", "split-plain-sub1"])
def test_fused_mlp_persistent_kernels_match_the_reference(tmp_path, monkeypatch, variant):
    """The gate/up kernel's SiLU*mul epilogue (both products in one K loop, one loop after the other,
    or g through h's buffer in two launches) and the down projection through TMA, ragged tiles,
    more tiles than programs; fp32 keeps the pointer kernels."""
    cfg = dict(variant, GU_BLOCK_M=32, GU_BLOCK_N=32, GU_BLOCK_K=32, DOWN_BLOCK_M=32, DOWN_BLOCK_N=64,
               DOWN_BLOCK_K=32, FP32_BLOCK_M=32, FP32_BLOCK_N=32, FP32_BLOCK_K=16)
    mod = _load(MLP, cfg, tmp_path)
    assert mod.valid_config(dict(MLP.kernel_file("triton").config, **cfg))
    seen = _spy(mod, monkeypatch, ["_persistent_kernel", "_gate_up_kernel", "_down_kernel"])
    gen = MLP.gen(44)
    expect = []
    for dtype in CPU_DTYPES:
        args = MLP.make({"tokens": 70, "hidden": 96, "ffn": 136}, dtype, gen)
        MLP.check(mod.kernel_fn(*args), args, dtype)
        if dtype == torch.float32:
            expect += ["_gate_up_kernel", "_down_kernel"]
        else:
            order = variant.get("GU_ORDER", "together")
            expect += (["_persistent_kernel", "_persistent_kernel gate_in"] if order == "split" else
                       ["_persistent_kernel gated" + (" sequential" if order == "sequential" else "")])
            expect.append("_persistent_kernel" if variant.get("DOWN_VARIANT") == "persistent" else "_down_kernel")
    assert [name + (" gated" if kw.get("GATED") else "") + (" sequential" if kw.get("SEQUENTIAL") else "")
            + (" gate_in" if kw.get("GATE_IN") else "") for name, _, kw in seen] == expect
    gate_up = next(kw for name, grid, kw in seen if kw.get("GATED") or kw.get("GATE_IN"))
    assert gate_up["PROGRAMS"] == 3 and gate_up["SUBTILE"] == variant["EPILOGUE_SUBTILE"]


def test_fused_mlp_prepared_plan_checks_each_calls_addresses_for_tma(tmp_path, monkeypatch):
    """The plan of a (shapes, strides) key is made once; whether TMA can describe x is a property of
    its base address too, which the key does not fix: a repeated call with x 2 bytes off 16 takes the
    pointer gate/up (and stays right), the next aligned one the persistent kernel again."""
    cfg = {"GU_VARIANT": "persistent", "DOWN_VARIANT": "persistent", "EPILOGUE_SUBTILE": 2, "GU_ORDER": "split",
           "GU_BLOCK_M": 32, "GU_BLOCK_N": 32, "GU_BLOCK_K": 32, "DOWN_BLOCK_M": 32, "DOWN_BLOCK_N": 64,
           "DOWN_BLOCK_K": 32}
    mod = _load(MLP, cfg, tmp_path)
    seen = _spy(mod, monkeypatch, ["_persistent_kernel", "_gate_up_kernel", "_down_kernel"])
    dtype = torch.float16
    x, wg, wu, wd = MLP.make({"tokens": 40, "hidden": 64, "ffn": 96}, dtype, MLP.gen(46))
    buf = torch.empty(x.numel() + 1, dtype=dtype)
    off = buf[1:].view_as(x)  # same shape and strides, base 2 bytes past a 16-byte boundary
    off.copy_(x)
    assert x.data_ptr() % 16 == 0 and off.data_ptr() % 16 == 2
    for operand in (x, off, x):
        seen.clear()
        MLP.check(mod.kernel_fn(operand, wg, wu, wd), (operand, wg, wu, wd), dtype)
        names = [name + (" gate_in" if kw.get("GATE_IN") else "") for name, _, kw in seen]
        gu = (["_persistent_kernel", "_persistent_kernel gate_in"] if operand.data_ptr() % 16 == 0
              else ["_gate_up_kernel"])
        assert names == gu + ["_persistent_kernel"], names
    assert len(mod._PLANS) == 1


@pytest.mark.parametrize("order", ["together", "sequential", "split"])
def test_fused_mlp_tail_pieces_cover_the_last_wave(tmp_path, monkeypatch, order):
    """TAIL_NARROW: the tiles past the last full wave of programs go to a second launch as narrower
    pieces, where the pieces fit in one wave (the interpreter has 3 programs)."""
    cfg = {"GU_VARIANT": "persistent", "DOWN_VARIANT": "persistent", "EPILOGUE_SUBTILE": 1, "GU_ORDER": order,
           "TAIL_NARROW": 2, "GU_BLOCK_M": 32, "GU_BLOCK_N": 32, "GU_BLOCK_K": 32, "DOWN_BLOCK_M": 32,
           "DOWN_BLOCK_N": 64, "DOWN_BLOCK_K": 32}
    base = MLP.kernel_file("triton").config
    mod = _load(MLP, cfg, tmp_path)
    assert mod.valid_config(dict(base, **cfg))
    assert not mod.valid_config(dict(base, **dict(cfg, EPILOGUE_SUBTILE=2)))  # 8-column pieces
    seen = _spy(mod, monkeypatch, ["_persistent_kernel"])
    dtype = torch.float16
    gu_role = "plain" if order == "split" else "gated"
    full, tail = ((3,), 32, 1), ((2,), 16, 2)  # 3 programs over the full waves; 2 half-width pieces
    down = [((3,), 64, 1, "plain"), ((2,), 32, 2, "plain")]  # 4 down tiles: a wave of 3 and a tail of 1
    cases = [
        # 10 gate/up tiles: 3 waves and a tail of 1, in 2 pieces
        ({"tokens": 64, "hidden": 96, "ffn": 160}, [full, tail]),
        # 8 gate/up tiles: a tail of 2 would be 4 pieces on 3 programs: one launch for all 8
        ({"tokens": 64, "hidden": 128, "ffn": 128}, [full]),
    ]
    for shape, gu in cases:
        seen.clear()
        args = MLP.make(shape, dtype, MLP.gen(47))
        MLP.check(mod.kernel_fn(*args), args, dtype)
        expect = [l + (gu_role,) for l in gu]
        if order == "split":
            expect += [l + ("gate_in",) for l in gu]
        got = [(grid, kw["BN"], kw.get("NARROW", 1),
                "gated" if kw.get("GATED") else "gate_in" if kw.get("GATE_IN") else "plain") for _, grid, kw in seen]
        assert got == expect + down, got


def test_fused_mlp_search_spends_no_trial_on_switches_its_dtype_never_reads():
    source = starter_path("fused_mlp", "triton").read_text()
    config = dict(read_kernel_file(starter_path("fused_mlp", "triton")).config, GU_VARIANT="pointer",
                  DOWN_VARIANT="pointer")
    switches = {"EPILOGUE_SUBTILE", "PERSISTENT_LOOP"}
    bf16 = set(effective_names(source, config, "bf16"))
    assert not (switches | {"GU_ORDER"}) & bf16 and {"GU_VARIANT", "DOWN_VARIANT", "GU_BLOCK_M"} < bf16
    assert not any(n.startswith("FP32_") for n in bf16)
    down = set(effective_names(source, dict(config, DOWN_VARIANT="persistent"), "bf16"))
    assert switches < down and "GU_ORDER" not in down
    assert {"GU_ORDER"} | switches < set(effective_names(source, dict(config, GU_VARIANT="persistent"), "bf16"))
    fp32 = set(effective_names(source, dict(config, GU_VARIANT="persistent"), "fp32"))
    assert "FP32_PRECISION" in fp32 and not any(n.startswith(("GU_", "DOWN_")) for n in fp32)
    assert not switches & fp32
    # the committed start's ring tries both other gate/up orders within its first four members (a
    # kernel behind the library is explored for four experiments)
    from autokernel.proposers.search import ring_of

    kf = read_kernel_file(starter_path("fused_mlp", "triton"))
    names = effective_names(source, kf.config, "bf16")
    ring = ring_of(kf.config, kf.search_space, names, kf.structural, seed=0)
    assert [m["GU_ORDER"] for m in ring[:4:2]] == ["sequential", "split"]


def test_fused_mlp_valid_config_counts_the_epilogue_buffer():
    kf = MLP.kernel_file("triton")
    ok = import_kernel(kf).valid_config
    down4 = dict(kf.config, DOWN_VARIANT="persistent", DOWN_BLOCK_M=128, DOWN_BLOCK_N=256, DOWN_NUM_STAGES=4,
                 EPILOGUE_SUBTILE=1)
    assert ok(dict(down4, DOWN_VARIANT="pointer")) and ok(dict(down4, EPILOGUE_SUBTILE=2))
    assert not ok(down4)  # 192 KB of stages + a 64 KB tile
    # "split": one weight tile per stage and one accumulator, so 128x256 gate/up tiles fit; its epilogue
    # holds a g piece besides the store's (the sm_90a compile measured 213 KB at 3 stages, sub 2)
    split = dict(kf.config, GU_VARIANT="persistent", GU_ORDER="split", GU_BLOCK_M=128, GU_BLOCK_N=256,
                 GU_NUM_STAGES=3, EPILOGUE_SUBTILE=2)
    assert ok(split) and not ok(dict(split, GU_NUM_STAGES=4)) and not ok(dict(split, GU_ORDER="together"))

# ---------------------------------------------------------------- sm_90a: every benchmark candidate

@pytest.mark.slow
@pytest.mark.skipif(HAS_CUDA, reason="on a GPU the benchmark compiles them for real")
def test_every_benchmark_candidate_compiles_for_sm90a(tmp_path):
    """Each persistent and pointer candidate of benchmarks/gemm_hopper.py (bf16 matmul, fp32 matmul, fused MLP),
    launched under the interpreter with its launches recorded, then compiled by Triton for sm_90a
    and assembled by ptxas in a fresh process: so the GPU run spends no time on one that cannot
    build. Each must fit Hopper's shared memory without spills, use wgmma (16-bit) and TMA loads and
    stores; the warp-specialized ones must really be (a producer warpgroup: 12 warps, setmaxnreg)."""
    from autokernel.bench.gpu_compile import record_launches

    bench = _bench()
    groups = [(MM, bench.CANDIDATES, torch.float16, {"M": 256, "N": 512, "K": 256}),
              (MM, bench.FP32_CANDIDATES, torch.float32, {"M": 128, "N": 256, "K": 64}),
              # ffn 512: 4 gate/up tiles of 128x256 on the interpreter's 3 programs leave a tail of one
              (MLP, bench.MLP_CANDIDATES, torch.float16, {"tokens": 256, "hidden": 256, "ffn": 512})]
    jobs = []
    for kernel, candidates, dtype, shape in groups:
        for label, overrides in candidates.items():
            if overrides is None or overrides.get("VARIANT") == "tma":
                continue  # the committed starter and the TMA variant: compiled by the starters' tests
            mod = import_kernel(read_kernel_file(_write(tmp_path, kernel, overrides)))
            with record_launches() as launches:
                mod.kernel_fn(*kernel.make(shape, dtype, kernel.gen(45)))
            for rec in launches:
                if "persistent" in rec.name:
                    jobs.append(job(label, rec, programs=132))  # the H200's SMs
                elif label.startswith("pointer") and rec.name == "_matmul_tile_kernel":
                    jobs.append(job(label, rec))
    # MLP: sequential 2 launches, each split 3, split with a narrow tail 5 (gate and up twice each),
    # the starter with the loops' keeps 2 (its narrow tail runs inside the gate/up launch)
    assert len(jobs) == 9 + 2 + 2 + 5 + 2 + 3 + 3 + 5 + 2
    results = compile_sm90(jobs, tmp_path)
    for r in results:
        assert "error" not in r and r["ok"], r
        pointer = r["label"].startswith("pointer")
        assert r["smem"] <= 227 * 1024 and (pointer or (r["tma_load"] > 0 and r["tma_store"] > 0)), r
        fp32 = "ieee" in r["label"]
        # Triton 3.9 spills ~800 bytes in the fp32 FMA product fed from TMA tiles; 3.6 (the H200's) none
        assert r["spill"] == 0 or (fp32 and not triton.__version__.startswith("3.6")), r
        assert (r["wgmma"] == 0) if fp32 else (r["wgmma"] > 0), r  # fp32: exact FMA products, no tensor cores
        if "warp_specialize" in r["label"]:
            assert r["warps"] == 12 and r["setmaxnreg"] > 0, r


def _write(tmp_path: Path, kernel: Kernel, overrides: dict) -> Path:
    cfg = dict(overrides, SHAPE_CONFIGS="off") if kernel is MM else overrides
    path = tmp_path / f"{kernel.name}_{abs(hash(tuple(sorted(cfg.items()))))}.py"
    path.write_text(with_config(starter_path(kernel.name, "triton").read_text(), cfg))
    return path


# ---------------------------------------------------------------- benchmarks/gemm_hopper.py


def test_benchmark_candidates_are_valid_starter_configs():
    bench = _bench()
    for kernel, candidates in ((MM, bench.CANDIDATES), (MM, bench.FP32_CANDIDATES), (MLP, bench.MLP_CANDIDATES)):
        kf = kernel.kernel_file("triton")
        check = import_kernel(kf).valid_config
        for label, overrides in candidates.items():
            if overrides:
                assert all(v in kf.search_space[k] for k, v in overrides.items()), label
                assert check(dict(kf.config, **overrides)), label
    assert len(bench.CANDIDATES) <= 14  # ~1 s each per shape: the sweep stays near 2 minutes of a device call


@pytest.mark.slow
@pytest.mark.skipif(HAS_CUDA, reason="the CPU smoke run")
def test_benchmark_small_run_resumes_records_failures_and_its_choice_applies(tmp_path, monkeypatch, capsys):
    bench = _bench()
    # one candidate that cannot build: recorded with its reason, the run goes on
    monkeypatch.setitem(bench.CANDIDATES, "broken", {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128,
                                                     "NUM_STAGES": 5})
    out = {k: tmp_path / f"{k}" for k in ("r.md", "c.json", "p.jsonl")}
    argv = ["--small", "--results", str(out["r.md"]), "--configs-out", str(out["c.json"]),
            "--progress", str(out["p.jsonl"])]
    assert bench.main(argv) == 0
    rows = [json.loads(line) for line in out["p.jsonl"].read_text().splitlines()]
    gemm = [r for r in rows if r["section"] == "gemm"]
    assert len(gemm) == len(bench.SMALL) * (len(bench.CANDIDATES) + 1)  # + cuBLAS
    broken = [r for r in gemm if r["name"] == "broken"]
    assert all(r["ms"] is None and "valid_config rejects" in r["error"] for r in broken)
    assert all(r["ms"] and r["ms"] > 0 for r in gemm if r["name"] != "broken")  # every other one correct
    assert {r["section"] for r in rows} == {"gemm", "mlp", "fp32"}
    assert all(r["ms"] for r in rows if r["section"] != "gemm"), [r for r in rows if not r["ms"]]
    report = out["r.md"].read_text()
    assert "| broken | err | err |" in report and "broken at 64x96x128: ValueError: valid_config rejects" in report
    configs = json.loads(out["c.json"].read_text())
    for label in configs["chosen"]:
        m, n, k = (int(v) for v in label.split("x"))
        timed = {r["name"]: r["ms"] for r in gemm if r["shape"] == label and r["ms"] and r["name"] != "cuBLAS"}
        assert configs["chosen"][label] == min(timed, key=timed.get)
    assert set(configs["PERSISTENT_SHAPES"]) == {"64x96x128", "64x136x72"}

    # a second run with the same progress file measures nothing again
    capsys.readouterr()
    assert bench.main(argv) == 0
    assert len(out["p.jsonl"].read_text().splitlines()) == len(rows)
    assert " ms\n" not in capsys.readouterr().out.split("###")[0]

    # the choice, written into a copy of the starter, is what the starter then runs at that shape
    starter = tmp_path / "matmul_starter.py"
    starter.write_text(starter_path("matmul", "triton").read_text())
    assert bench.main(["--apply", str(out["c.json"]), "--starter", str(starter)]) == 0
    mod = import_kernel(read_kernel_file(starter))
    assert mod.PERSISTENT_SHAPES == configs["PERSISTENT_SHAPES"]
    assert bench.format_table(mod.PERSISTENT_SHAPES) in starter.read_text()
    seen = _spy(mod, monkeypatch, ["_matmul_persistent_kernel", "_matmul_tile_kernel", "_matmul_tma_kernel"])
    a, b = MM.make({"M": 40, "N": 136, "K": 72}, torch.float16, MM.gen(46))
    MM.check(mod.kernel_fn(a, b), (a, b), torch.float16)
    entry = configs["PERSISTENT_SHAPES"]["64x136x72"]
    expect = {"persistent": "_matmul_persistent_kernel", "tma": "_matmul_tma_kernel"}.get(entry["VARIANT"],
                                                                                       "_matmul_tile_kernel")
    assert seen[-1][0] == expect and seen[-1][2]["BM"] == entry["BLOCK_M"]


@pytest.mark.slow
@pytest.mark.skipif(HAS_CUDA, reason="checks the plumbing with a worker that fails for want of a GPU")
def test_compile_worker_results_reach_the_progress_file(tmp_path):
    """The torch.compile step runs in a subprocess whose per-item results (here: errors, there is no
    GPU) land in the progress file as they come; with too little time left it starts nothing."""
    bench = _bench()
    progress = bench.Progress(tmp_path / "p.jsonl")
    assert bench.compile_section(progress, bench.Clock(20), ["mlp", "64x64x64"]) == ["mlp", "64x64x64"]
    assert not progress.rows
    assert bench.compile_section(progress, bench.Clock(300), ["mlp", "64x64x64"]) == []
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [(r["section"], r["shape"], r["name"]) for r in rows] == [
        ("mlp", "2048x4096x11008", "torch.compile"), ("gemm", "64x64x64", "torch.compile")]
    assert all(r["ms"] is None and r["error"] for r in rows)


# Inductor's max-autotune report on stderr, in the layout select_algorithm writes it (torch 2.11-2.13)
AUTOTUNE_TEXT = """\
some other line
AUTOTUNE mm(2048x4096, 4096x4096)
strides: [4096, 1], [1, 4096]
dtypes: torch.bfloat16, torch.bfloat16
  triton_mm_20 0.0850 ms 100.0% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=64, BLOCK_M=128, BLOCK_N=256, EVEN_K=True, GROUP_M=8, num_stages=4, num_warps=8
  mm 0.0900 ms 94.4% 
  triton_mm_16 0.0950 ms 89.5% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=64, BLOCK_M=128, BLOCK_N=128, EVEN_K=True, GROUP_M=8, num_stages=5, num_warps=8
  triton_mm_3 0.1200 ms 70.8% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=32, BLOCK_M=64, BLOCK_N=64, EVEN_K=True, GROUP_M=8, num_stages=2, num_warps=4
SingleProcess AUTOTUNE benchmarking takes 1.2000 seconds and 3.4000 seconds precompiling for 21 choices
AUTOTUNE mm(2048x4096, 4096x11008)
strides: [4096, 1], [1, 4096]
dtypes: torch.bfloat16, torch.bfloat16
  mm 0.2600 ms 100.0% 
"""


def test_autotune_picks_reads_inductors_fastest_choices_best_first():
    bench = _bench()
    picks = bench.autotune_picks(AUTOTUNE_TEXT)
    assert len(picks) == 2
    first, second = picks
    assert first.startswith("mm(2048x4096, 4096x4096): triton_mm_20 0.0850 ms 100.0% ACC_TYPE=")
    assert "BLOCK_N=256" in first and "num_stages=4" in first
    assert first.count("; ") == 2 and "triton_mm_3" not in first  # the top three only
    assert "; mm 0.0900 ms 94.4%; triton_mm_16" in first
    assert second == "mm(2048x4096, 4096x11008): mm 0.2600 ms 100.0%"
    assert bench.autotune_picks("no autotuning here\n") == []

    import io

    log = bench.AutotuneLog(io.StringIO())  # what the compile worker puts in place of sys.stderr
    log.write(AUTOTUNE_TEXT)
    assert log.stream.getvalue() == AUTOTUNE_TEXT and log.take() == AUTOTUNE_TEXT and log.take() == ""


def test_report_puts_torch_compile_against_cublas_of_its_own_process(tmp_path):
    """The compile worker times cuBLAS next to the compiled GEMM: torch.compile's x cuBLAS is one
    process's clock (the main process's cuBLAS may have run at another clock minutes earlier)."""
    bench = _bench()
    progress = bench.Progress(tmp_path / "p.jsonl")
    for m, n, k in bench.LLAMA:
        shape = bench.label(m, n, k)
        progress.add("gemm", shape, "cuBLAS", 1.0)
        progress.add("gemm", shape, "starter", 1.25)
        progress.add("gemm", shape, "torch.compile", 0.8, library_ms=0.84, picks=[f"mm({shape}): triton_mm_1 0.8 ms"])
    progress.add("mlp", "2048x4096x11008", "cuBLAS + compiled silu*mul", 2.0)
    progress.add("mlp", "2048x4096x11008", "torch.compile", 1.6, library_ms=1.8, picks=["mm(a): mm 0.5 ms 100.0%"])
    text = bench.report(bench.Progress(tmp_path / "p.jsonl"), "env", bench.LLAMA, [], small=False)
    row = next(line for line in text.splitlines() if line.startswith("| 2048x4096x4096 |"))
    assert row.split("|")[-4:-1] == [" 0.8000 (86) ", " 0.8400 (82) ", " 1.050 "]
    assert "best 1.250x" not in text and "starter 0.800x, compile 1.050x (against its own process's cuBLAS)" in text
    assert "- 2048x4096x4096: mm(2048x4096x4096): triton_mm_1 0.8 ms" in text
    assert "| the library path, timed in torch.compile's process | 1.8000 | - | 0.889 |" in text
    assert "- mm(a): mm 0.5 ms 100.0%" in text


def test_apply_refuses_entries_the_starter_cannot_run(tmp_path):
    bench = _bench()
    starter = tmp_path / "matmul_starter.py"
    original = starter_path("matmul", "triton").read_text()
    starter.write_text(original)
    good = {"VARIANT": "persistent", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "NUM_WARPS": 8,
            "NUM_STAGES": 3, "EPILOGUE_SUBTILE": 2, "PERSISTENT_LOOP": "flatten", "TMA_DESC": "device"}
    for key, entry, why in (("2048x4096x4096", dict(good, NUM_WARPS=6), "outside the starter's SEARCH_SPACE"),
                            ("2048x4096x4096", dict(good, PERSISTENT_LOOP="warp_specialize"), "valid_config"),
                            ("2000x4096x4096", good, "power of two"),
                            ("2048x4096x4096", dict(good, EXTRA=1), "keys")):
        with pytest.raises(ValueError, match=why):
            bench.apply_configs({"PERSISTENT_SHAPES": {key: entry}}, starter)
        assert starter.read_text() == original  # nothing written
    assert bench.main(["--apply", str(tmp_path / "missing.json"), "--starter", str(starter)]) == 1


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("label", ["persistent 128x256 w8 s3 sub2 flatten", "persistent 128x256 w8 s4 sub2 flatten host",
                                   "persistent 128x256 w8 s3 sub2 plain", "persistent 128x256 w4 s3 warp_specialize"])
@pytest.mark.parametrize("shape", [{"M": 2048, "N": 4096, "K": 4096}, {"M": 300, "N": 1000, "K": 520}],
                         ids=MM.spec.shape_label)
def test_persistent_candidates_on_the_gpu(tmp_path, label, shape):
    mod = import_kernel(read_kernel_file(_write(tmp_path, MM, _bench().CANDIDATES[label])))
    for dtype in (torch.bfloat16, torch.float16):
        a, b = MM.make(shape, dtype, MM.gen(47, "cuda"), device="cuda")
        for bb in (b, b.contiguous()):
            MM.check(mod.kernel_fn(a, bb), (a, bb), dtype)


@pytest.mark.gpu
def test_fp32_persistent_is_exact_on_the_gpu(tmp_path):
    """fp32 through the persistent variant at KernelBench's 1e-4 against float64."""
    for label, overrides in _bench().FP32_CANDIDATES.items():
        if overrides:
            mod = import_kernel(read_kernel_file(_write(tmp_path, MM, overrides)))
            a, b = MM.make({"M": 1024, "N": 1000, "K": 2048}, torch.float32, MM.gen(48, "cuda"), device="cuda")
            MM.check(mod.kernel_fn(a, b), (a, b), torch.float32)

