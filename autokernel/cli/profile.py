"""`autokernel profile`: where a model spends its GPU time, by kernel type; stored as a profile."""

from __future__ import annotations

import json
from typing import Any, Optional

import typer
from rich.table import Table

from autokernel.cli.console import out


def _shapes_text(entry: dict[str, Any], limit: int = 3) -> str:
    parts = []
    for shape, weight in list(zip(entry.get("shapes", []), entry.get("weights", [])))[:limit]:
        dims = "x".join(str(v) for v in shape.values())
        parts.append(f"{dims} ×{weight}")
    more = len(entry.get("shapes", [])) - limit
    return ", ".join(parts) + (f", +{more} more" if more > 0 else "")


def profile_table(result: dict[str, Any], top: int | None = None) -> Table:
    """The profile as a Rich table (also used by verify and the benchmark script)."""
    basis = result["time_basis"]
    unit = "GPU" if basis == "gpu kernel time" else "CPU self"
    table = Table(title=f"{result['model']} on {result['device']} ({basis})", show_lines=False)
    for col, just in (("kernel type", "left"), (f"share of {unit} time", "right"), ("ms / fwd", "right"),
                      ("calls / fwd", "right"), ("shapes (×calls / fwd)", "left"), ("dtype", "left"),
                      ("Amdahl ceiling", "right"), ("from", "left")):
        table.add_column(col, justify=just)
    entries = [e for e in result["entries"] if e["kernel_type"] != "other"]
    other = [e for e in result["entries"] if e["kernel_type"] == "other"]
    shown = entries if top is None else entries[:top]
    hidden = entries[len(shown):]
    for e in shown:
        table.add_row(e["kernel_type"], f"{100 * e['share']:.1f}%", f"{e['gpu_ms']:.3f}", str(e["calls"]),
                      _shapes_text(e), e["dtype"], f"{e['amdahl']:.2f}x", e["label"])
    rest_ms = sum(e["gpu_ms"] for e in hidden) + sum(e["gpu_ms"] for e in other)
    rest_share = sum(e["share"] for e in hidden) + sum(e["share"] for e in other)
    top_other = ", ".join(o["name"] for o in (other[0].get("top_ops", []) if other else [])[:3])
    table.add_row("other", f"{100 * rest_share:.1f}%", f"{rest_ms:.3f}", "", top_other, "", "", "",
                  style="dim")
    table.add_section()
    table.add_row("total", "100%", f"{result['total_gpu_ms']:.3f}", "", f"measured forward: {result['forward_ms']:.3f} ms",
                  "", "", "")
    return table


LAUNCH_BOUND_RATIO = 0.85  # kernels busy less of the forward than this: the CPU sets the pace


def notes(result: dict[str, Any]) -> list[str]:
    lines = []
    if result["entries"] and any(e["kernel_type"] == "fused_mlp" for e in result["entries"]):
        lines.append(f"fused_mlp holds the MLP blocks' GEMMs too (gate, up, down); counted as matmul the "
                     f"matmul share would be {100 * result['matmul_share_incl_mlp']:.1f}%.")
    if result["time_basis"] == "cpu self time":
        lines.append("No GPU: shares are CPU self time of the ops, not GPU kernel time.")
    elif result["forward_ms"]:
        ratio = result["total_gpu_ms"] / result["forward_ms"]
        lines.append(f"Attributed GPU time is {100 * ratio:.1f}% of the measured forward time.")
        if ratio < LAUNCH_BOUND_RATIO:
            lines.append(f"The GPU is idle {100 * (1 - ratio):.0f}% of the forward pass: it is launch-bound (CPU "
                         "overhead), so faster kernels will barely show end to end; a larger --batch/--seq "
                         "or CUDA graphs move the bottleneck back to the kernels.")
    return lines


def register(app: typer.Typer) -> None:
    @app.command("profile")
    def profile_cmd(
        ctx: typer.Context,
        model: str = typer.Option(..., "--model", "-m", help="Preset (gpt2, llama, llama-7b, bert-base, *-tiny), "
                                                             "a local transformers model, or file.py:factory."),
        batch: int = typer.Option(1, "--batch", min=1, help="Batch size of the example inputs."),
        seq: Optional[int] = typer.Option(None, "--seq", min=1, help="Sequence length (default: the preset's)."),
        dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16 | fp16 | fp32 (default bf16 on GPU, fp32 on CPU)."),
        device: Optional[str] = typer.Option(None, "--device", help="cuda | cpu (default cuda when available)."),
        top: int = typer.Option(10, "--top", min=1, help="Rows to show; the rest is folded into other."),
        warmup: int = typer.Option(3, "--warmup", min=0, help="Forward passes before profiling."),
        iters: int = typer.Option(5, "--iters", min=1, help="Profiled forward passes."),
        as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON."),
    ) -> None:
        """Profile a model's forward pass and rank its kernels by share of GPU time."""
        from autokernel.models import load_model
        from autokernel.profile import profile_model
        from autokernel.store import Store

        paths = ctx.obj.ensure()
        bundle = load_model(model, batch=batch, seq=seq, dtype=dtype, device=device)
        result = profile_model(bundle, warmup=warmup, iters=iters)
        with Store(paths.db) as store:
            row = store.add_profile(result.model, result.entries, config=result.config, device=result.device,
                                    total_gpu_ms=result.total_gpu_ms, forward_ms=result.forward_ms)
        data = {"profile_id": row.id, **result.to_dict()}
        if as_json:
            out.print_json(json.dumps(data))
            return
        out.print(profile_table(data, top))
        for line in notes(data):
            out.print(line)
        out.print(f"profile {row.id} stored; next: autokernel extract --profile {row.id}")
