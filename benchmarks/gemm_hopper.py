"""GEMM-class kernels on Hopper against cuBLAS and torch.compile, in one process and one time box
(issue 20): picks the matmul starter's configuration per shape and times the SwiGLU MLP.

    python benchmarks/gemm_hopper.py --results $OUT/gemm_hopper.md --configs-out $OUT/gemm_configs.json \
        [--deadline-s 330] [--progress FILE] [--no-compile] [--no-mlp] [--no-fp32]
    python benchmarks/gemm_hopper.py --apply gemm_configs.json     # no GPU: commit the choice into the starter

On the GPU, in this order, each step skipped once the deadline is near:
1. bf16 matmul at the LLaMA-7B shapes (M = 2048, B = W.t()) and 4096^3, 8192^3: cuBLAS (torch.matmul)
   and every entry of CANDIDATES (the matmul starter's variants and tiles), each checked against
   cuBLAS at the spec's bf16 tolerance and timed with triton.testing.do_bench (L2 flushed between
   repetitions, median). A candidate that fails to compile or run is recorded and skipped.
2. the SwiGLU MLP (T=2048, D=4096, F=11008, bf16): cuBLAS GEMMs + torch.compile'd silu*mul (one fused
   elementwise kernel: the best separate silu*mul at hand), the fused_mlp starter and its persistent
   gate/up variant.
3. fp32 at 4096^3 (KernelBench's judgement: TF32 off, atol = rtol = 1e-4): cuBLAS, the starter's
   pointer path and its persistent variant (exact "ieee" products).
4. torch.compile(mode="max-autotune-no-cudagraphs") of the MLP, then of each GEMM, in a subprocess
   that is stopped at the deadline (its autotuning alone can take minutes).
Every measurement is appended to --progress as it is made; a rerun with the same file skips what
it already has. The report (markdown) is printed and appended to --results; the fastest correct
candidate per shape goes to --configs-out as the starter's PERSISTENT_SHAPES entries.

`--small` runs the same steps on the CPU under TRITON_INTERPRET=1 (tiny fp16 shapes, wall-clock
timing, no torch.compile): the tests use it to check the logic.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
from autokernel.kernelfile import import_kernel, parse_source, with_config  # noqa: E402
from autokernel.kernels import get_spec, starter_path  # noqa: E402

LLAMA = [(2048, 4096, 4096), (2048, 11008, 4096), (2048, 4096, 11008), (2048, 32000, 4096)]  # (M, N, K)
SQUARE = [(4096, 4096, 4096), (8192, 8192, 8192)]
SMALL = [(64, 96, 128), (40, 136, 72)]  # --small: M not a power of two, N not a tile multiple
MLP_SHAPE = {"tokens": 2048, "hidden": 4096, "ffn": 11008}
FP32_SHAPE = (4096, 4096, 4096)

# The keys of a PERSISTENT_SHAPES entry: the 16-bit tunables the per-shape table may set.
TABLE_KEYS = ("VARIANT", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "NUM_WARPS", "NUM_STAGES", "EPILOGUE_SUBTILE",
              "PERSISTENT_LOOP", "TMA_DESC")


def _persistent(bm, bn, warps, stages, sub, loop, desc="device", bk=64, group=8):
    return {"VARIANT": "persistent", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, "NUM_WARPS": warps,
            "NUM_STAGES": stages, "EPILOGUE_SUBTILE": sub, "PERSISTENT_LOOP": loop, "TMA_DESC": desc}


# What is known to work for bf16 GEMMs on H100/H200 (BM 128, BN 128/256, BK 64, 3-4 stages, 8 warps,
# GROUP_M 8), in each loop schedule Triton 3.6 compiles for sm_90a (warp specialization only at 4
# warps, see valid_config), plus the non-persistent TMA variant. tests/test_gemm_hopper.py compiles
# every one of them for sm_90a without a GPU. "starter" is the starter file as committed.
CANDIDATES = {
    "starter": None,
    "persistent 128x256 w8 s3 sub2 flatten": _persistent(128, 256, 8, 3, 2, "flatten"),
    "persistent 128x256 w8 s4 sub2 flatten": _persistent(128, 256, 8, 4, 2, "flatten"),
    "persistent 128x256 w8 s4 sub2 flatten host": _persistent(128, 256, 8, 4, 2, "flatten", "host"),
    "persistent 128x256 w8 s4 sub4 flatten": _persistent(128, 256, 8, 4, 4, "flatten"),
    "persistent 128x256 w8 s3 sub2 plain": _persistent(128, 256, 8, 3, 2, "plain"),
    "persistent 256x128 w8 s3 sub2 flatten": _persistent(256, 128, 8, 3, 2, "flatten"),
    "persistent 128x128 w4 s4 sub1 flatten": _persistent(128, 128, 4, 4, 1, "flatten"),
    "persistent 128x256 w4 s3 warp_specialize": _persistent(128, 256, 4, 3, 1, "warp_specialize"),
    # the ninth session's winners with another L2 grouping
    "persistent 128x256 w8 s3 sub2 flatten g16": _persistent(128, 256, 8, 3, 2, "flatten", group=16),
    # the non-persistent pointer kernel at the tiles of Inductor's own Hopper GEMM template configs
    # (torch.compile max-autotune measured 1.05x cuBLAS at these shapes, twelfth session); the
    # 128x128x128 tiles and the 4-warp 128x128 warp specialization lost at every shape there
    "pointer 128x256 w8 s4": {"VARIANT": "pointer", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
                              "NUM_WARPS": 8, "NUM_STAGES": 4},
    "pointer 128x128 w8 s5": {"VARIANT": "pointer", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8,
                              "NUM_WARPS": 8, "NUM_STAGES": 5},
    "tma 128x256 w8 s3": {"VARIANT": "tma", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
                          "NUM_WARPS": 8, "NUM_STAGES": 3},
}
FP32_CANDIDATES = {
    "starter": None,
    "persistent 64x128x32 w8 s3 ieee flatten": {"FP32_VARIANT": "persistent", "PERSISTENT_LOOP": "flatten",
                                                "EPILOGUE_SUBTILE": 2},
    "persistent 64x128x32 w8 s3 ieee plain": {"FP32_VARIANT": "persistent", "PERSISTENT_LOOP": "plain",
                                              "EPILOGUE_SUBTILE": 1},
}


def _mlp(gu_stages, down, sub):
    cfg = {"GU_VARIANT": "persistent", "GU_BLOCK_M": 128, "GU_BLOCK_N": 128, "GU_BLOCK_K": 64, "GU_NUM_WARPS": 8,
           "GU_NUM_STAGES": gu_stages, "EPILOGUE_SUBTILE": sub, "PERSISTENT_LOOP": "flatten", "GROUP_M": 8}
    if down:
        cfg.update({"DOWN_VARIANT": "persistent", "DOWN_BLOCK_M": 128, "DOWN_BLOCK_N": 256, "DOWN_BLOCK_K": 64,
                    "DOWN_NUM_WARPS": 8, "DOWN_NUM_STAGES": down})
    else:
        cfg["DOWN_VARIANT"] = "pointer"
    return cfg


# the fused_mlp starter's persistent gate/up (SiLU*mul epilogue, two accumulators: a 128x256 GEMM
# tile's registers) and persistent down projection, both flattened
MLP_CANDIDATES = {
    "starter": None,
    "persistent gate/up 128x128 s3 + down 128x256 s3, sub1": _mlp(3, 3, 1),
    "persistent gate/up 128x128 s4 + down 128x256 s4, sub2": _mlp(4, 4, 2),
    "persistent gate/up 128x128 s4 sub2 + pointer down": _mlp(4, 0, 2),
    # the gate/up orders (the starter's GU_ORDER): one K loop after the other at the same tile, and
    # the plain GEMM twice at the matmul's best tile, g through h's buffer
    "persistent gate/up sequential 128x128 s4 + down 128x256 s4, sub2": dict(_mlp(4, 4, 2), GU_ORDER="sequential"),
    "persistent gate/up split 128x256 s3 + down 128x256 s4, sub2": dict(
        _mlp(3, 4, 2), GU_ORDER="split", GU_BLOCK_N=256),
    "persistent gate/up split 128x128 s4 + down 128x256 s4, sub2": dict(_mlp(4, 4, 2), GU_ORDER="split"),
    # ... with the last wave's tiles in half-width pieces (TAIL_NARROW: 5.2 waves of 128x256 at N = 11008)
    "persistent gate/up split 128x256 s3 + down 128x256 s4, sub2, tail 2": dict(
        _mlp(3, 4, 2), GU_ORDER="split", GU_BLOCK_N=256, TAIL_NARROW=2),
    # what the H100's llama-7b loops kept on the starter (runs 4-7: GU_NUM_STAGES=3; run 7: TAIL_NARROW=2,
    # together -4.5% over the model's MLP calls)
    "starter, GU_NUM_STAGES=3, TAIL_NARROW=2 (the H100 loops' keeps)": {"GU_NUM_STAGES": 3, "TAIL_NARROW": 2},
}


def label(m: int, n: int, k: int) -> str:
    return f"{m}x{n}x{k}"  # the matmul spec's shape label (M x N x K)


def candidate_source(kernel_type: str, overrides: dict | None) -> str:
    """The starter's source with `overrides` written in; SHAPE_CONFIGS off (matmul) so that the
    committed per-shape table cannot stand in for the candidate being measured."""
    source = starter_path(kernel_type, "triton").read_text()
    if overrides is None:
        return source
    cfg = dict(overrides)
    if kernel_type == "matmul":
        cfg["SHAPE_CONFIGS"] = "off"
    return with_config(source, cfg)


def load(kernel_type: str, overrides: dict | None, cache: Path):
    """The candidate as a module; ValueError when the starter's valid_config rejects it."""
    kf = parse_source(candidate_source(kernel_type, overrides))
    mod = import_kernel(kf, cache_dir=cache)
    if not mod.valid_config(dict(kf.config)):
        raise ValueError(f"valid_config rejects {overrides}")
    return mod


# ------------------------------------------------------------------------------------------ timing


class Clock:
    def __init__(self, deadline_s: float):
        self.start = time.monotonic()
        self.deadline_s = deadline_s

    def left(self) -> float:
        return self.deadline_s - (time.monotonic() - self.start)


def gpu_time(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def cpu_time(fn, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


class Progress:
    """Measurements keyed by (section, shape, name), appended to a JSONL file as they are made."""

    def __init__(self, path: Path | None):
        self.path = path
        self.rows: dict[tuple, dict] = {}
        if path is not None and path.exists():
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                    self.rows[(row["section"], row["shape"], row["name"])] = row
                except (ValueError, KeyError):
                    continue  # a line cut short by a kill: measured again

    def get(self, section: str, shape: str, name: str) -> dict | None:
        return self.rows.get((section, shape, name))

    def add(self, section: str, shape: str, name: str, ms: float | None, error: str | None = None, **more) -> dict:
        row = {"section": section, "shape": shape, "name": name, "ms": ms, "error": error, **more}
        self.rows[(section, shape, name)] = row
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
        return row


def _short(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:200]


def measure(progress: Progress, clock: Clock, timer, section: str, shape: str, name: str, fn, check) -> dict | None:
    """One (section, shape, name) measurement: from the progress file when it is there, else run
    fn once, check(out) (a string when wrong), and time it; errors are recorded, not raised.
    None when the deadline came first."""
    done = progress.get(section, shape, name)
    if done is not None:
        return done
    if clock.left() < 5:
        return None
    try:
        out = fn()
        wrong = check(out)
        del out
        if wrong:
            return progress.add(section, shape, name, None, f"wrong: {wrong}")
        ms = timer(fn)
    except Exception as exc:  # one failing config must not end the run
        return progress.add(section, shape, name, None, _short(exc))
    row = progress.add(section, shape, name, ms)
    print(f"  {section} {shape} {name}: {ms:.4f} ms", flush=True)
    return row


def measure_candidates(ctx, section: str, shape: str, kernel_type: str, candidates: dict, call, check,
                       mods: dict | None = None) -> None:
    """measure() each of `candidates` (name -> the starter's tunables to change, None: as committed):
    call(module) runs it. `mods` keeps the loaded modules across shapes; a candidate that cannot
    load is recorded with its reason at this shape."""
    progress, clock, timer, cache = ctx
    mods = {} if mods is None else mods
    for name, overrides in candidates.items():
        if progress.get(section, shape, name) is not None:
            continue
        if name not in mods:
            try:
                mods[name] = load(kernel_type, overrides, cache)
            except Exception as exc:
                progress.add(section, shape, name, None, _short(exc))
                continue
        mod = mods[name]
        measure(progress, clock, timer, section, shape, name, lambda: call(mod), check)


def closeness(tol: tuple[float, float]):
    atol, rtol = tol

    def check(out, ref):
        if out.shape != ref.shape or out.dtype != ref.dtype:
            return f"shape/dtype {tuple(out.shape)} {out.dtype}"
        o, r = out.float(), ref.float()
        if not torch.isfinite(o).all():
            return "non-finite values"
        bad = (o - r).abs() > atol + rtol * r.abs()
        if bad.any():
            return f"{int(bad.sum())} elements past atol={atol} rtol={rtol}, max err {(o - r).abs().max().item():.3g}"
        return None

    return check


# ------------------------------------------------------------------------------------------ sections


def gemm_section(args, progress, clock, timer, device, dtype, cache) -> None:
    spec = get_spec("matmul")
    shapes = SMALL if args.small else LLAMA + SQUARE
    mods = {}
    for m, n, k in shapes:
        if clock.left() < 5:
            break
        shape = label(m, n, k)
        gen = torch.Generator(device=device).manual_seed(0)
        a, b = spec.make_inputs({"M": m, "N": n, "K": k}, dtype, device, gen)  # b = W.t()
        ref = torch.matmul(a.float(), b.float()).to(dtype)
        check = closeness(spec.tolerance(dtype))
        measure(progress, clock, timer, "gemm", shape, "cuBLAS", lambda: torch.matmul(a, b), lambda o: check(o, ref))
        measure_candidates((progress, clock, timer, cache), "gemm", shape, "matmul", CANDIDATES,
                           lambda mod: mod.kernel_fn(a, b), lambda o: check(o, ref), mods)
        del a, b, ref
        if device == "cuda":
            torch.cuda.empty_cache()


def mlp_section(args, progress, clock, timer, device, dtype, cache) -> None:
    import torch.nn.functional as F

    spec = get_spec("fused_mlp")
    shape = {"tokens": 64, "hidden": 128, "ffn": 96} if args.small else MLP_SHAPE
    key = spec.shape_label(shape)
    gen = torch.Generator(device=device).manual_seed(0)
    x, wg, wu, wd = spec.make_inputs(shape, dtype, device, gen)
    ref = spec.reference(*(t.float() for t in (x, wg, wu, wd))).to(dtype)
    check = closeness(spec.tolerance(dtype))
    silu_mul = (lambda g, u: F.silu(g) * u) if args.small else torch.compile(lambda g, u: F.silu(g) * u)

    def library():
        return F.linear(silu_mul(F.linear(x, wg), F.linear(x, wu)), wd)

    measure(progress, clock, timer, "mlp", key, "cuBLAS + compiled silu*mul", library, lambda o: check(o, ref))
    measure(progress, clock, timer, "mlp", key, "eager (cuBLAS + silu, mul)",
            lambda: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd), lambda o: check(o, ref))
    measure_candidates((progress, clock, timer, cache), "mlp", key, "fused_mlp", MLP_CANDIDATES,
                       lambda mod: mod.kernel_fn(x, wg, wu, wd), lambda o: check(o, ref))


def fp32_section(args, progress, clock, timer, device, cache) -> None:
    spec = get_spec("matmul")
    m, n, k = (48, 80, 96) if args.small else FP32_SHAPE
    shape = label(m, n, k)
    gen = torch.Generator(device=device).manual_seed(0)
    a, b = spec.make_inputs({"M": m, "N": n, "K": k}, torch.float32, device, gen)
    ref = spec.reference(a, b)  # TF32 off
    check = closeness((1e-4, 1e-4))  # KernelBench's fp32 judgement
    measure(progress, clock, timer, "fp32", shape, "cuBLAS (TF32 off)", lambda: spec.reference(a, b),
            lambda o: check(o, ref))
    measure_candidates((progress, clock, timer, cache), "fp32", shape, "matmul", FP32_CANDIDATES,
                       lambda mod: mod.kernel_fn(a, b), lambda o: check(o, ref))


class AutotuneLog:
    """A copy of what Inductor's max-autotune writes to stderr: per tuned op an `AUTOTUNE op(sizes)`
    line, then its fastest choices, best first (name, ms, % of the best, the template's config)."""

    def __init__(self, stream):
        self.stream, self.text = stream, []

    def write(self, data):
        self.text.append(data)
        return self.stream.write(data)

    def flush(self):
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)

    def take(self) -> str:
        text, self.text = "".join(self.text), []
        return text


def autotune_picks(text: str, top: int = 3) -> list[str]:
    """Per `AUTOTUNE` block of Inductor's stderr: its op and its `top` fastest choices, one line each
    (\"mm(2048x4096, 4096x4096): triton_mm_12 0.0850 ms 100.0% BLOCK_M=128, ...; mm 0.0900 ms 94.4%\")."""
    picks, block, choices = [], None, []
    for line in text.splitlines() + ["AUTOTUNE end"]:
        if line.startswith("AUTOTUNE "):
            if block is not None:
                picks.append(f"{block}: " + "; ".join(choices[:top]))
            block, choices = line[len("AUTOTUNE "):].strip(), []
        elif block is not None and line.startswith("  ") and " ms " in line:
            choices.append(" ".join(line.split())[:300])
    return picks


def compile_worker(names: list[str]) -> None:
    """In its own process: torch.compile(max-autotune-no-cudagraphs) of the MLP and each GEMM,
    one JSON line per result, so a kill at the deadline keeps what was done. Each is timed next to
    its library path in this same process (cuBLAS; for the MLP, cuBLAS + compiled silu*mul), so its
    x library is one process's clock, not two; Inductor's fastest choices per tuned op go with it."""
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False
    log = AutotuneLog(sys.stderr)
    sys.stderr = log
    for name in names:
        t0 = time.monotonic()
        section, shape = _compile_key(name)
        try:
            log.take()
            if name == "mlp":
                spec = get_spec("fused_mlp")
                args = spec.make_inputs(MLP_SHAPE, torch.bfloat16, "cuda", torch.Generator("cuda").manual_seed(0))
                fn = torch.compile(lambda x, wg, wu, wd: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd),
                                   mode="max-autotune-no-cudagraphs")
                silu_mul = torch.compile(lambda g, u: F.silu(g) * u)
                library = (lambda x, wg, wu, wd: F.linear(silu_mul(F.linear(x, wg), F.linear(x, wu)), wd))
            else:
                m, n, k = (int(v) for v in name.split("x"))
                args = get_spec("matmul").make_inputs({"M": m, "N": n, "K": k}, torch.bfloat16, "cuda",
                                                      torch.Generator("cuda").manual_seed(0))
                fn = torch.compile(lambda a, b: a @ b, mode="max-autotune-no-cudagraphs")
                library = torch.matmul
            fn(*args)
            library(*args)
            torch.cuda.synchronize()
            picks = autotune_picks(log.take())
            lib_ms = gpu_time(lambda: library(*args))
            ms = gpu_time(lambda: fn(*args))
            row = {"section": section, "shape": shape, "name": "torch.compile", "ms": ms, "library_ms": lib_ms,
                   "picks": picks, "compile_s": round(time.monotonic() - t0, 1)}
        except Exception as exc:
            row = {"section": section, "shape": shape, "name": "torch.compile", "ms": None, "error": _short(exc)}
        print("RESULT " + json.dumps(row), flush=True)
        torch._dynamo.reset()
        torch.cuda.empty_cache()


def _compile_key(name: str) -> tuple[str, str]:
    """(section, shape) under which the compile worker's result for `name` is kept."""
    return ("mlp", get_spec("fused_mlp").shape_label(MLP_SHAPE)) if name == "mlp" else ("gemm", name)


def compile_section(progress, clock, names: list[str]) -> list[str]:
    """Run compile_worker for the names not yet measured, until the deadline; the names it did
    not reach are returned (reported as skipped)."""
    todo = [n for n in names if progress.get(*_compile_key(n), "torch.compile") is None]
    if not todo or clock.left() < 30:
        return todo
    # its own process group: Inductor's autotuning workers go down with it at the deadline
    proc = subprocess.Popen([sys.executable, __file__, "--compile-worker", ",".join(todo)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=True)

    def read():
        for line in proc.stdout:
            if line.startswith("RESULT "):
                row = json.loads(line[len("RESULT "):])
                more = {key: row[key] for key in ("library_ms", "picks") if key in row}
                progress.add(row["section"], row["shape"], "torch.compile", row["ms"], row.get("error"), **more)
                print(f"  compile {row}", flush=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=max(1.0, clock.left() - 3))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    reader.join(timeout=5)
    return [n for n in todo if progress.get(*_compile_key(n), "torch.compile") is None]


# ------------------------------------------------------------------------------------------ report


def _fmt(ms: float | None, flops: float) -> str:
    return "-" if ms is None else f"{ms:.4f} ({flops / ms / 1e9:.0f})"


def choose(progress: Progress, shapes) -> dict[str, tuple[str, float]]:
    """Per GEMM shape: (fastest correct candidate, its ms)."""
    best = {}
    for m, n, k in shapes:
        shape = label(m, n, k)
        timed = [(r["ms"], name) for name in CANDIDATES if (r := progress.get("gemm", shape, name)) and r["ms"]]
        if timed:
            ms, name = min(timed)
            best[shape] = (name, ms)
    return best


def table_entries(best: dict[str, tuple[str, float]]) -> dict[str, dict]:
    """PERSISTENT_SHAPES entries for the chosen candidates (the starter's own values fill the keys a
    candidate leaves alone), keyed as the starter looks them up."""
    kf = parse_source(starter_path("matmul", "triton").read_text())
    starter = import_kernel(kf, cache_dir=Path(tempfile.mkdtemp()))
    out = {}
    for shape, (name, _) in best.items():
        m, n, k = (int(v) for v in shape.split("x"))
        # "starter" ran what the committed file runs there (its table entry, if it has one)
        overrides = CANDIDATES[name]
        cfg = starter.call_config(torch.bfloat16, m, n, k) if overrides is None else dict(kf.config, **overrides)
        out[starter.shape_key(m, n, k)] = {key: cfg[key] for key in TABLE_KEYS}
    return out


def report(progress: Progress, env: str, shapes, skipped: list[str], small: bool) -> str:
    lines = [f"### GEMM-class kernels on Hopper ({env})", "",
             "do_bench medians (L2 flushed between repetitions), ms (TFLOP/s); x = cuBLAS time / time. "
             "`starter`: the matmul starter as committed. torch.compile's x is against cuBLAS timed in its own "
             "process, next to it (a column of its own).", ""]
    best = choose(progress, shapes)
    lines += ["| shape (MxNxK) | cuBLAS | starter | x | best candidate | best | x | torch.compile | its cuBLAS | x |",
              "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    sums = {"cublas": 0.0, "best": 0.0, "starter": 0.0, "compile": 0.0, "compile_cublas": 0.0}
    picks = []
    complete = {"best": True, "starter": True, "compile": True}
    for m, n, k in shapes:
        shape = label(m, n, k)
        flops = 2.0 * m * n * k
        cub = (progress.get("gemm", shape, "cuBLAS") or {}).get("ms")
        st = (progress.get("gemm", shape, "starter") or {}).get("ms")
        comp_row = progress.get("gemm", shape, "torch.compile") or {}
        comp, comp_lib = comp_row.get("ms"), comp_row.get("library_ms")
        if comp_row.get("picks"):
            picks.append(f"- {shape}: " + " / ".join(comp_row["picks"]))
        name, bms = best.get(shape, ("-", None))

        def x(v, base=cub):
            return f"{base / v:.3f}" if base and v else "-"

        lines.append(f"| {shape} | {_fmt(cub, flops)} | {_fmt(st, flops)} | {x(st)} | {name} | {_fmt(bms, flops)} | "
                     f"{x(bms)} | {_fmt(comp, flops)} | {_fmt(comp_lib, flops)} | {x(comp, comp_lib)} |")
        if (m, n, k) in LLAMA and cub:
            sums["cublas"] += cub
            for key, v in (("best", bms), ("starter", st)):
                if v:
                    sums[key] += v
                else:
                    complete[key] = False
            if comp and comp_lib:
                sums["compile"] += comp
                sums["compile_cublas"] += comp_lib
            else:
                complete["compile"] = False
    if sums["cublas"] and not small:
        parts = [f"{key} {sums['cublas'] / sums[key]:.3f}x" for key in ("best", "starter")
                 if sums[key] and complete[key]]
        if sums["compile"] and complete["compile"]:
            parts.append(f"compile {sums['compile_cublas'] / sums['compile']:.3f}x (against its own process's cuBLAS)")
        lines += ["", f"Time-weighted over the LLaMA-7B shapes (sum of cuBLAS times / sum of times): "
                      f"{', '.join(parts) or '-'}."]
    if picks:
        lines += ["", "What torch.compile's max-autotune picked (its fastest choices per tuned op, best first):", ""]
        lines += picks
    # the whole sweep: x cuBLAS per candidate and shape, or why it has no time
    lines += ["", "Sweep (x cuBLAS; `err`/`wrong` rows list the reason below):", "",
              "| candidate | " + " | ".join(label(*s) for s in shapes) + " |",
              "|---|" + "---:|" * len(shapes)]
    notes = []
    for name in CANDIDATES:
        cells = []
        for s in shapes:
            shape = label(*s)
            r = progress.get("gemm", shape, name)
            cub = (progress.get("gemm", shape, "cuBLAS") or {}).get("ms")
            if r is None:
                cells.append("-")
            elif r["ms"] is None:
                cells.append("wrong" if (r["error"] or "").startswith("wrong") else "err")
                notes.append(f"- {name} at {shape}: {r['error']}")
            else:
                cells.append(f"{cub / r['ms']:.3f}" if cub else f"{r['ms']:.4f} ms")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [""] + notes if notes else []
    for section, title in (("mlp", "SwiGLU MLP"), ("fp32", "fp32 matmul (TF32 off, judged at 1e-4)")):
        rows = [r for (sec, _, _), r in progress.rows.items() if sec == section]
        if not rows:
            continue
        base = next((r["ms"] for r in rows if r["name"].startswith("cuBLAS")), None)
        notes_mlp = []
        comp = next((r["ms"] for r in rows if r["name"] == "torch.compile"), None)
        lines += ["", f"{title} at {rows[0]['shape']}:", "", "| implementation | ms | x cuBLAS-based | x torch.compile |",
                  "|---|---:|---:|---:|"]
        for r in rows:
            ms = r["ms"]
            lines.append(f"| {r['name']} | {'%.4f' % ms if ms else r['error']} | "
                         f"{'%.3f' % (base / ms) if base and ms else '-'} | {'%.3f' % (comp / ms) if comp and ms else '-'} |")
            if r.get("library_ms"):  # the library path timed in the compile process: x compile on one clock
                lib = r["library_ms"]
                lines.append(f"| the library path, timed in torch.compile's process | {lib:.4f} | - | "
                             f"{'%.3f' % (ms / lib) if ms else '-'} |")
            for pick in r.get("picks") or []:
                notes_mlp.append(f"- {pick}")
        if notes_mlp:
            lines += ["", "torch.compile's picks:", ""] + notes_mlp
    if skipped:
        lines += ["", f"Not reached before the deadline: torch.compile of {', '.join(skipped)}."]
    return "\n".join(lines) + "\n"


def environment(device: str) -> str:
    import triton

    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if device != "cuda":
        return f"CPU interpreter, {when}, torch {torch.__version__}, triton {triton.__version__}"
    driver = "?"
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        pass
    return (f"{torch.cuda.get_device_name()}, driver {driver}, CUDA {torch.version.cuda}, torch {torch.__version__}, "
            f"triton {triton.__version__}, {when}")


# ------------------------------------------------------------------------------------------ applying


def format_table(table: dict[str, dict]) -> str:
    """PERSISTENT_SHAPES as Python source, one entry over two lines."""
    if not table:
        return "PERSISTENT_SHAPES = {}\n"
    out = ["PERSISTENT_SHAPES = {"]
    for key in sorted(table, key=lambda s: tuple(int(v) for v in s.split("x"))):
        items = [f"{k!r}: {table[key][k]!r}" for k in TABLE_KEYS]
        out.append(f"    {key!r}: {{{', '.join(items[:5])},")
        out.append(f"        {', '.join(items[5:])}}},")
    out.append("}")
    return "\n".join(out) + "\n"


def apply_configs(configs: dict, path: Path) -> dict[str, dict]:
    """Write configs["PERSISTENT_SHAPES"] into the matmul starter at `path` after checking every
    entry against the starter's SEARCH_SPACE and valid_config; raises ValueError on a bad entry."""
    table = configs.get("PERSISTENT_SHAPES", configs)
    source = path.read_text()
    kf = parse_source(source)
    mod = import_kernel(kf, cache_dir=Path(tempfile.mkdtemp()))
    for key, entry in table.items():
        parts = key.split("x")
        if len(parts) != 3 or not all(p.isdigit() for p in parts) or int(parts[0]) & (int(parts[0]) - 1):
            raise ValueError(f"{key}: not MxNxK with M a power of two")
        if set(entry) != set(TABLE_KEYS):
            raise ValueError(f"{key}: keys {sorted(entry)} are not {sorted(TABLE_KEYS)}")
        for name, value in entry.items():
            if value not in kf.search_space[name]:
                raise ValueError(f"{key}: {name}={value!r} is outside the starter's SEARCH_SPACE")
        if not mod.valid_config(dict(kf.config, **entry)):
            raise ValueError(f"{key}: the starter's valid_config rejects {entry}")
    tree = ast.parse(source)
    node = next((n for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                 and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "PERSISTENT_SHAPES"), None)
    if node is None:
        raise ValueError(f"{path}: no PERSISTENT_SHAPES assignment")
    lines = source.splitlines(keepends=True)
    path.write_text("".join(lines[: node.lineno - 1]) + format_table(table) + "".join(lines[node.end_lineno:]))
    return table


# ------------------------------------------------------------------------------------------ main


def run(args) -> int:
    device = "cpu" if args.small else "cuda"
    dtype = torch.float16 if args.small else torch.bfloat16  # the interpreter's bf16 dots are wrong
    timer = cpu_time if args.small else gpu_time
    clock = Clock(args.deadline_s)
    progress = Progress(args.progress)
    cache = Path(tempfile.mkdtemp(prefix="gemm_hopper_"))
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    env = environment(device)
    print(env, flush=True)
    sections = [("gemm", lambda: gemm_section(args, progress, clock, timer, device, dtype, cache))]
    if not args.no_mlp:
        sections.append(("mlp", lambda: mlp_section(args, progress, clock, timer, device, dtype, cache)))
    if not args.no_fp32:
        sections.append(("fp32", lambda: fp32_section(args, progress, clock, timer, device, cache)))
    for name, section in sections:
        try:
            section()
        except Exception:  # a section's set-up failing (out of memory, ...) leaves the others to run
            print(f"section {name} failed:\n{traceback.format_exc()}", flush=True)
    shapes = SMALL if args.small else LLAMA + SQUARE
    skipped = []
    if not args.small and not args.no_compile:
        skipped = compile_section(progress, clock, ["mlp"] + [label(*s) for s in shapes])
    text = report(progress, env, shapes, skipped, args.small)
    print(text, flush=True)
    if args.results:
        with args.results.open("a") as f:
            f.write("\n" + text)
    if args.configs_out:
        best = choose(progress, shapes)
        args.configs_out.write_text(json.dumps({"environment": env, "chosen": {s: n for s, (n, _) in best.items()},
                                                "PERSISTENT_SHAPES": table_entries(best)}, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, help="append the markdown report here")
    ap.add_argument("--configs-out", type=Path, help="write the chosen per-shape configs (JSON) here")
    ap.add_argument("--progress", type=Path, help="JSONL of measurements: appended to, and resumed from")
    ap.add_argument("--deadline-s", type=float, default=330.0, help="stop starting measurements after this")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (max-autotune)")
    ap.add_argument("--no-mlp", action="store_true")
    ap.add_argument("--no-fp32", action="store_true")
    ap.add_argument("--small", action="store_true", help="CPU interpreter smoke run (tiny fp16 shapes)")
    ap.add_argument("--apply", type=Path, help="write a --configs-out JSON into the matmul starter and exit")
    ap.add_argument("--starter", type=Path, help="the starter file --apply writes (default: the package's)")
    ap.add_argument("--compile-worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.compile_worker:
        compile_worker(args.compile_worker.split(","))
        return 0
    if args.apply:
        path = args.starter or starter_path("matmul", "triton")
        try:
            table = apply_configs(json.loads(args.apply.read_text()), path)
        except (OSError, ValueError) as exc:
            print(f"cannot apply {args.apply}: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {len(table)} PERSISTENT_SHAPES entries into {path}")
        return 0
    if not args.small and not torch.cuda.is_available():
        print("no CUDA device: run with --small for the CPU smoke run", file=sys.stderr)
        return 1
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
