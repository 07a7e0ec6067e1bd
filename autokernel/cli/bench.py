"""`autokernel bench`: judge one kernel file (or a type's starter) and record it as an experiment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from autokernel.cli.console import err, out, warn_if_unsandboxed
from autokernel.textfmt import number


def _resolve_kernel(kernel: str, backend: str) -> Path:
    from autokernel.errors import ConfigError
    from autokernel.kernels import KERNEL_TYPES, starter_path

    path = Path(kernel)
    if path.is_file():
        return path
    if kernel in KERNEL_TYPES:
        p = starter_path(kernel, backend)
        if not p.is_file():
            raise ConfigError(f"no {backend} starter for {kernel} yet ({p})")
        return p
    raise ConfigError(f"{kernel!r} is neither a kernel file nor a kernel type",
                      hint=f"types: {', '.join(KERNEL_TYPES)}")


def parse_shapes(spec, texts: List[str]) -> list[dict]:
    """--shape values as the spec's shape dicts; a malformed or non-positive one is a usage error
    naming --shape (it must never reach the judge, where it would look like the kernel's fault)."""
    shapes = []
    for text in texts:
        try:
            shape = spec.parse_shape(text)
        except ValueError as exc:
            why = str(exc) if "shape" in str(exc) else f"expected {'x'.join(spec.shape_keys)} as integers"
            raise typer.BadParameter(f"{text!r}: {why}", param_hint="'--shape'") from None
        bad = [k for k, v in shape.items() if v < 1 and not (k == "causal" and v == 0)]
        if bad:
            raise typer.BadParameter(f"{text!r}: {', '.join(bad)} must be at least 1", param_hint="'--shape'")
        shapes.append(shape)
    return shapes


def _table(res, path: Path):
    from rich.table import Table

    t = Table(title=f"{res.kernel_type} ({res.backend}, {res.dtype}) {path}", show_header=True)
    t.add_column("stage")
    t.add_column("verdict")
    t.add_column("max abs err", justify="right")
    t.add_column("max rel err", justify="right")
    t.add_column("detail", overflow="fold")
    colour = {"pass": "green", "fail": "red", "error": "red", "skip": "yellow"}
    for s in res.stages:
        t.add_row(s.name, f"[{colour.get(s.status, 'white')}]{s.status}[/]", number(s.max_abs_err, ".2e"),
                  number(s.max_rel_err, ".2e"), s.detail)
    return t


def _timing_table(res):
    from rich.table import Table

    t = Table(title="timing (CUDA events, L2 flushed, median of repetitions)")
    for col in ("shape", "latency us", "IQR us", "eager us", "compile us", "vs eager", "vs compile"):
        t.add_column(col, justify="right")
    for row in res.extra.get("per_shape", []):
        lat, e, c = row["latency_us"], row.get("eager_us"), row.get("compile_us")
        t.add_row("x".join(str(v) for v in row["shape"].values()), number(lat, ".1f"), number(row["iqr_us"], ".1f"),
                  number(e, ".1f"), number(c, ".1f"),
                  number(e / lat if e else None, ".2f", "x"), number(c / lat if c else None, ".2f", "x"))
    t.add_row("[bold]weighted[/]", number(res.latency_us, ".1f"), number(res.latency_iqr_us, ".1f"),
              number(res.eager_us, ".1f"), number(res.compile_us, ".1f"), number(res.speedup_vs_eager, ".2f", "x"),
              number(res.speedup_vs_compile, ".2f", "x"))
    return t


def bench_command(
    ctx: typer.Context,
    kernel: Optional[str] = typer.Argument(None, help="A kernel file, or a kernel type (its starter for --backend)."),
    backend: str = typer.Option("triton", "--backend", help="triton | cuda (when KERNEL is a type)."),
    shape: Optional[List[str]] = typer.Option(None, "--shape", help="Shape to time, e.g. 4096x32000 (repeatable)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16 | fp16 | fp32 (default bf16 on GPU, fp32 on CPU)."),
    quick: bool = typer.Option(False, "--quick", help="Check only the requested dtype and fewer shapes."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, help="Time limit for the candidate, seconds."),
    calibrate_: bool = typer.Option(False, "--calibrate", help="Measure this device's ceilings (again) and store them."),
    gpu_compile: bool = typer.Option(True, "--gpu-compile/--no-gpu-compile",
                                     help="Without a GPU: also compile a Triton kernel that passes for sm_90."),
) -> None:
    """Run the 5 correctness stages, anti-cheat and GPU timing on one kernel; record an experiment."""
    from autokernel.bench import BenchWorker, calibrate, ceilings_of
    from autokernel.errors import ConfigError, IncorrectKernelError
    from autokernel.kernelfile import read_kernel_file
    from autokernel.kernels import get_spec
    from autokernel.kernels.spec import dtype_name
    from autokernel.store import Store

    if backend not in ("triton", "cuda"):
        raise ConfigError(f"--backend must be triton or cuda, not {backend!r}")
    if kernel is None and not calibrate_:
        raise ConfigError("give a kernel file or a kernel type", hint="e.g. autokernel bench softmax")
    # every option is checked before the worker starts and before anything is recorded
    path = kf = spec = None
    if kernel is not None:
        path = _resolve_kernel(kernel, backend)
        kf = read_kernel_file(path)
        spec = get_spec(kf.kernel_type)
    shapes = parse_shapes(spec, shape) if shape and spec is not None else None
    try:
        dt = dtype_name(dtype) if dtype else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--dtype'") from None
    warn_if_unsandboxed()
    paths = ctx.obj.ensure()
    with Store(paths.db) as store, BenchWorker() as worker:
        interpreted = bool(worker.info.get("interpreted"))
        device = None
        if calibrate_ or not interpreted:
            device = calibrate(store, force=calibrate_, worker=worker)
            if calibrate_:
                msg = (f"{device.name}: copy {number(device.copy_gbps, '.1f')} GB/s, matmul fp32 "
                       f"{number(device.matmul_tflops_fp32, '.1f')} / "
                       f"fp16 {number(device.matmul_tflops_fp16, '.1f')} / bf16 "
                       f"{number(device.matmul_tflops_bf16, '.1f')} TFLOP/s (measured, stored as {device.key})")
                if as_json and kernel is None:
                    out.print_json(json.dumps({"device": device.model_dump(mode="json")}))
                else:
                    (err if as_json else out).print(msg, highlight=False)
        if kernel is None:
            return
        res = worker.judge(path, shapes=shapes, dtype=dt, quick=quick, timeout_s=timeout,
                           ceilings=ceilings_of(device) if device is not None else None,
                           gpu_compile=gpu_compile and interpreted)
        run = store.create_run("bench", config={"kernel": str(path), "shapes": shapes, "dtype": dt, "quick": quick},
                               device=res.device or None)
        fields = res.experiment_fields()
        fields.setdefault("status", "baseline")
        exp = store.add_experiment(run_id=run.id, kernel_type=res.kernel_type or kf.kernel_type,
                                   backend=res.backend or kf.backend, proposer="manual",
                                   tag=f"{kf.kernel_type}-bench", description=f"bench {path}",
                                   config_json=json.dumps(kf.config), **fields)
        store.finish_run(run.id)
    if as_json:
        out.print_json(json.dumps({"run": run.id, "experiment": exp.number, "result": res.to_dict()}, default=str))
    else:
        out.print(_table(res, path))
        if res.gpu_timing:
            out.print(_timing_table(res))
            bound = "copy bandwidth" if res.bound == "memory" else f"cuBLAS {res.dtype}"
            out.print(f"{number(res.tflops, '.2f')} TFLOP/s, {number(res.gbps, '.0f')} GB/s, "
                      f"{number(res.pct_peak, '.1f', '%')} of the measured {bound} ceiling; "
                      f"peak VRAM {number(res.peak_vram_mb, '.1f')} MB; torch.compile mode "
                      f"{res.extra.get('compile_mode')}" + ("  [bold yellow]FLAGGED: too good to be true, review[/]"
                                                              if res.flagged else ""), highlight=False)
        else:
            out.print("[yellow]ran in Triton interpreter mode on the CPU: correctness only; timings are not GPU "
                      "timings and none are reported[/]")
        if res.launched_kernels:
            out.print(f"launched: {', '.join(res.launched_kernels[:8])}", highlight=False)
        out.print(f"outcome [bold]{res.outcome}[/] in {res.duration_s:.1f} s (run {run.id}, experiment {exp.number})")
    if not res.correct:
        raise IncorrectKernelError(f"{path}: {res.outcome}" + (f": {res.error.splitlines()[-1][:300]}" if res.error else ""))


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_command)
