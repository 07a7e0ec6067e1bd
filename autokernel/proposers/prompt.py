"""The prompt of the LLM proposer: what an expert kernel engineer would want on the desk.

System: the answer format and rules (rules.md), the judge's own rules (judge_bench.md for a model's
kernel, judge_kb.md for a KernelBench problem) and the playbook of the backend (playbook.md for
Triton, cuda.md plus the architecture notes for CUDA).

User: the kernel and its reference (or the problem, its shapes and its ops); per shape the bytes,
FLOPs, roofline target in microseconds and whether it is memory- or compute-bound, against this
device's measured ceilings (the datasheet's, said so, without a GPU); the best version's position
and its Amdahl share; the keep threshold; a strategy by progress; the last failure with its diff
and error; what each recent experiment changed; the toolchain; the current file and the answer's
token budget. Every section is plain text built from plain values: nothing here runs candidate code.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import re
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any, Optional, Sequence

from autokernel.proposers.answers import FINAL_MARK
from autokernel.proposers.base import KernelContext, history_config
from autokernel.textfmt import number

FAILED = ("incorrect", "crashed", "timeout")
ACHIEVED = ("kept", "baseline")
TOKEN_BYTES = 3.0  # bytes of Python source per token, rounded down (so budgets err large)


@dataclass
class FailedAnswer:
    """An answer that gave no candidate (from llm_calls): what the model is told about it."""

    status: str
    error: str
    created_at: Optional[datetime] = None


def prompt_text(name: str) -> str:
    return resources.files("autokernel.prompts").joinpath(name).read_text()


def kernel_notes(kernel_type: str) -> str:
    """The type's notes.md, beside its spec and starters ("" for an unknown type or none)."""
    from autokernel.kernels import registry

    try:
        return registry.notes(kernel_type)
    except KeyError:
        return ""


def _section(text: str, heading: str) -> str:
    m = re.search(rf"^## {re.escape(heading)}.*?(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    return m.group(0).strip() if m else ""


def system_prompt(backend: str, judge: str) -> str:
    parts = [prompt_text("rules.md"), prompt_text("judge_kb.md" if judge == "kb" else "judge_bench.md")]
    if backend == "cuda":
        parts += [prompt_text("cuda.md"), _section(prompt_text("playbook.md"), "Architecture")]
    else:
        parts.append(prompt_text("playbook.md"))
    return "\n\n".join(p.strip() for p in parts) + "\n"


def source_tokens(source: str) -> int:
    return int(len(source.encode()) / TOKEN_BYTES) + 1


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# -- roofline ---------------------------------------------------------------------------------------


def ceilings_for(kernel: KernelContext) -> tuple[dict[str, float], str]:
    """(copy GB/s and matmul TFLOP/s per dtype, where they come from)."""
    if kernel.ceilings and kernel.ceilings.get("copy_gbps"):
        c = kernel.ceilings
        return ({"copy_gbps": c["copy_gbps"], "float32": c.get("matmul_tflops_fp32"),
                 "float16": c.get("matmul_tflops_fp16"), "bfloat16": c.get("matmul_tflops_bf16")},
                f"measured on this device ({kernel.device or 'GPU'})")
    from autokernel.bench.ceilings import DATASHEET

    d = DATASHEET["NVIDIA H200"]
    return ({"copy_gbps": d["hbm_gbps"], "float32": d["fp32_tflops"], "float16": d["fp16_tflops"],
             "bfloat16": d["bf16_tflops"]},
            "no GPU here, so none measured; the NVIDIA H200 datasheet's peaks, of which the bench measures "
            "about 4.2 TB/s copy and 730-750 TFLOP/s bf16 cuBLAS on the real device")


def ceilings_line(ceil: dict[str, float], where: str) -> str:
    mm = ", ".join(f"{dt} {ceil[dt]:.0f}" for dt in ("bfloat16", "float16", "float32") if ceil.get(dt))
    return f"Ceilings, {where}: copy {ceil['copy_gbps']:.0f} GB/s (read + write); matmul TFLOP/s: {mm}."


def roofline_section(spec: Any, kernel: KernelContext) -> str:
    """Per shape: bytes, FLOPs, the roofline target and the bound; the best version's time beside it."""
    if spec is None or not callable(getattr(spec, "flops", None)) or not kernel.shapes:
        return ""
    from autokernel.kernels.spec import dtype_name, to_dtype

    try:
        dt_name = dtype_name(kernel.dtype)
        dt = to_dtype(dt_name)
    except ValueError:
        return ""
    ceil, where = ceilings_for(kernel)
    measured = {json.dumps(s.get("shape"), sort_keys=True): s for s in kernel.best_per_shape}
    gpu = bool(kernel.ceilings)
    lines = [f"## Roofline per shape ({dt_name})", ceilings_line(ceil, where),
             "| shape | calls/forward | bytes | FLOPs | FLOP/byte | target us | bound | best us | % of target |",
             "|---|---|---|---|---|---|---|---|---|"]
    weights = kernel.weights or [1.0] * len(kernel.shapes)
    for shape, w in list(zip(kernel.shapes, weights))[:8]:
        nbytes, flops = float(spec.bytes(shape, dt)), float(spec.flops(shape, dt))
        t_mem = nbytes / (ceil["copy_gbps"] * 1e9) * 1e6
        t_comp = flops / (ceil[dt_name] * 1e12) * 1e6 if ceil.get(dt_name) else 0.0
        target = max(t_mem, t_comp)
        bound = "compute" if t_comp > t_mem else "memory"
        best = measured.get(json.dumps(shape, sort_keys=True), {}).get("latency_us")
        pct = f"{100 * target / best:.0f}%" if best and gpu else "-"
        label = "x".join(str(shape[k]) for k in shape)
        lines.append(f"| {label} | {w:g} | {nbytes:.3g} | {flops:.3g} | {flops / nbytes if nbytes else 0:.2f} | "
                     f"{target:.3g} | {bound} | {number(best)} | {pct} |")
    if not gpu and measured:
        lines.append("(best us here is CPU wall clock under the Triton interpreter: it ranks candidates against "
                     "each other, it is not a GPU time.)")
    return "\n".join(lines)


# -- where the kernel stands ------------------------------------------------------------------------


def best_row(history: Sequence[Any]):
    rows = [e for e in history if e.status in ACHIEVED and e.latency_us]
    return min(rows, key=lambda e: e.latency_us) if rows else None


def position_section(history: Sequence[Any], kernel: KernelContext) -> str:
    from autokernel.amdahl import model_speedup
    from autokernel.orchestrator import keep_threshold_us

    b = best_row(history)
    lines = ["## Where it stands"]
    if b is None:
        lines.append("No timed version yet.")
    else:
        lines.append(f"Best so far: {b.latency_us:.2f} us (IQR {number(b.latency_iqr_us)} us), "
                     f"{number(b.pct_peak, '.1f')}% of the measured ceiling, "
                     f"{number(b.speedup_vs_eager)}x eager PyTorch, "
                     f"{number(b.speedup_vs_compile)}x torch.compile. The current file is that best version.")
        thr = keep_threshold_us(b.latency_us, b.latency_iqr_us)
        lines.append(f"Keep threshold: a correct candidate is kept only if its latency is below best - max((its own "
                     f"IQR + the best's IQR) / 2, 1% of best), i.e. under {thr:.2f} us when its own IQR is small.")
    share = kernel.share or 0.0
    if share > 0:
        twice = model_speedup([(share, 2.0)])
        ceiling = float("inf") if share >= 1 else 1.0 / (1.0 - share)
        lines.append(f"Amdahl: this kernel is {100 * share:.1f}% of the model's GPU time; 2x on it makes the model "
                     f"{twice:.3f}x faster, and the most it can give (its time to zero) is "
                     f"{'unbounded' if ceiling == float('inf') else f'{ceiling:.2f}x'}.")
    return "\n".join(lines)


def _signature(status: str, error: Optional[str]) -> str:
    first = (error or "").strip().split("\n", 1)[0]
    return f"{status}: " + re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?(e[-+]?\d+)?", "#", first.lower())[:80]


def attempts_in_order(history: Sequence[Any], answers: Sequence[FailedAnswer]) -> list[tuple[bool, str]]:
    """(failed, signature) of every attempt on the kernel, oldest first: experiments and unusable answers."""
    items = [(e.created_at, e.status in FAILED, _signature(e.status, e.error)) for e in history
             if e.status not in ("running", "abandoned", "baseline")]
    items += [(a.created_at, True, _signature(a.status, a.error)) for a in answers]
    items.sort(key=lambda t: (t[0] is None, t[0] or datetime.min))
    return [(failed, sig) for _, failed, sig in items]


def strategy_section(history: Sequence[Any], answers: Sequence[FailedAnswer], kernel: KernelContext) -> str:
    lines = ["## Strategy"]
    attempts = attempts_in_order(history, answers)
    last3 = attempts[-3:]
    if len(last3) == 3 and all(f for f, _ in last3) and len({s for _, s in last3}) == 1:
        lines.append(f"Your last 3 attempts failed the same way ({last3[0][1]}). Abandon that approach: go back "
                     "to the current file and try a different idea, not another variant of the same one.")
    b = best_row(history)
    pct = b.pct_peak if b is not None else None
    if pct is None:
        lines.append("The roofline position is not measured here; judge by the per-shape targets above. Work "
                     "down the playbook's tiers; structural changes (fewer passes, fusion, better tiling) pay "
                     "more than constants.")
    elif pct >= 70:
        lines.append(f"Near the roofline ({pct:.0f}%): only tuning is left. Move block sizes, warps and stages one "
                     "at a time; restructuring risks more than it can gain.")
    elif pct >= 30:
        lines.append(f"Mid-way ({pct:.0f}% of the roofline): memory access and fusion (playbook tiers 2-3) are where "
                     "the remaining time is.")
    else:
        lines.append(f"Far below the roofline ({pct:.0f}%): restructure (tiling, algorithm, fewer passes over "
                     "memory); tuning the current structure will not close a gap this large.")
    since_keep = 0
    for e in reversed([e for e in history if e.status not in ("running", "abandoned")]):
        if e.status in ACHIEVED:
            break
        since_keep += 1
    if since_keep >= 5:
        lines.append(f"No keep in the last {since_keep} experiments: that line of attack has stalled; change the "
                     "structure rather than its constants.")
    return "\n".join(lines)


# -- what happened ----------------------------------------------------------------------------------


def failure_section(history: Sequence[Any], answers: Sequence[FailedAnswer], kernel: KernelContext,
                    last_result: Any) -> str:
    """The latest attempt, when it failed: an unusable answer (its error), or a candidate the judge
    rejected (its error and its diff against the current file)."""
    done = [e for e in history if e.status not in ("running", "abandoned")]
    last_exp = done[-1] if done else None
    last_ans = answers[-1] if answers else None
    if last_ans is not None and (last_exp is None or last_exp.created_at is None or last_ans.created_at is None
                                 or last_ans.created_at > last_exp.created_at):
        return (f"## Your last answer could not be used ({last_ans.status})\n{last_ans.error[:1500]}\n"
                "Fix that in this answer; follow the answer format exactly.")
    if last_exp is None or last_exp.status not in FAILED:
        return ""
    error = (last_exp.error or getattr(last_result, "error", None) or last_exp.status)[-1500:]
    parts = [f"## The last candidate failed (#{last_exp.number}, {last_exp.status}): {last_exp.description[:100]}",
             f"Error:\n```\n{error.strip()}\n```"]
    if kernel.failed_diff:
        parts.append(f"Its change against the current kernel.py (fix the slip, or drop the idea):\n```diff\n"
                     f"{kernel.failed_diff.strip()}\n```")
    return "\n".join(parts)


def _config_change(e, previous: Optional[dict]) -> str:
    cfg = history_config(e)
    if previous is None:
        return ""
    moved = [f"{k} {previous.get(k)!r} -> {v!r}" for k, v in sorted(cfg.items()) if previous.get(k) != v]
    return "; ".join(moved) or "no tunable changed"


def history_section(history: Sequence[Any], kernel: KernelContext, limit: int) -> str:
    rows = [e for e in history if e.status != "running"]
    if not rows:
        return "## Recent experiments on this kernel\n(no experiments yet)"
    lines = [f"## Recent experiments on this kernel (oldest first; the last {min(limit, len(rows))} of {len(rows)})"]
    previous: Optional[dict] = None
    shown = set(e.id for e in rows[-limit:])
    for e in rows:
        if e.id in shown:
            lat = f"{e.latency_us:.2f} us" if e.latency_us is not None else "no time"
            lines.append(f"- #{e.number} {e.status} ({e.proposer}): {lat}, {number(e.pct_peak, '.1f')}% of roofline, "
                         f"{number(e.speedup_vs_eager)}x eager. \"{e.description[:100]}\"")
            change = kernel.changes.get(e.id) if e.id is not None else None
            if change:
                lines += ["  changed:"] + [f"    {ln}" for ln in change.splitlines()]
            elif e.proposer != "baseline":
                lines.append(f"  changed: {_config_change(e, previous) or 'unknown'}")
            if e.status in FAILED and e.error:
                lines.append(f"  error: {' '.join(e.error.split())[:200]}")
        if e.status in ACHIEVED:
            previous = history_config(e)
    return "\n".join(lines)


def toolchain_section(backend: str) -> str:
    text = (f"## Toolchain\nTriton {_version('triton')}, PyTorch {_version('torch')}: use the `triton.language` API "
            f"of that Triton version.")
    if backend == "cuda":
        text += ("\nBackend cuda: CUDA C++ built by autokernel.cuda.build.load_extension (nvcc, sm_90; CUDA_SRC "
                 "without torch headers, CPP_SRC against torch/extension.h, tunables through DEFINES); see the "
                 "CUDA playbook.")
    return text


# -- the whole prompt -------------------------------------------------------------------------------


def build_prompt(source: str, spec: Any, history: Sequence[Any], last_result: Any,
                 kernel: Optional[KernelContext], *, recent: int = 8, answers: Sequence[FailedAnswer] = (),
                 max_tokens: Optional[int] = None) -> tuple[str, str]:
    """(system, user) messages for one proposal."""
    kernel = kernel or KernelContext(name=getattr(spec, "name", "kernel"), kernel_type=getattr(spec, "name", ""),
                                     backend="triton", dtype="float32")
    judge = getattr(spec, "judge", "bench")
    system = system_prompt(kernel.backend, judge)
    parts = [f"# Kernel: {kernel.name} ({kernel.kernel_type}, {kernel.backend})"]
    notes = kernel_notes(kernel.kernel_type)
    if notes:
        parts.append("## Notes for this kernel type\n" + notes)
    if spec is not None:
        try:
            ref = inspect.getsource(spec.reference)
        except (OSError, TypeError):
            ref = repr(spec.reference)
        title = "The problem" if judge == "kb" else "The reference (what kernel_fn must compute)"
        parts.append(f"## {title}\n{spec.description}\n```python\n{ref.rstrip()}\n```")
        if getattr(spec, "facts", ""):
            parts.append(spec.facts)
    if judge != "kb":
        shapes = ", ".join(json.dumps(s) for s in kernel.shapes[:8]) or "the spec's default shapes"
        parts.append(f"## What it is timed on\ndtype {kernel.dtype}; the model's shapes (weights = calls per "
                     f"forward {kernel.weights[:8]}): {shapes}")
    parts += [roofline_section(spec, kernel), position_section(history, kernel),
              strategy_section(history, answers, kernel), failure_section(history, answers, kernel, last_result),
              history_section(history, kernel, recent), toolchain_section(kernel.backend)]
    tokens = source_tokens(source)
    parts.append(f"## The current kernel.py ({source.count(chr(10))} lines, about {tokens} tokens)\n"
                 f"```python\n{source}```")
    ask = "Write a faster version following the rules. Begin with the DESCRIPTION line."
    if max_tokens:
        fits = tokens * 1.15 + 500 < max_tokens
        ask += (f" Your answer may use up to {max_tokens} tokens; "
                + ("edits are the shorter answer, the whole file (marked "
                   f"`{FINAL_MARK}`) also fits." if fits else "the whole file would not fit: answer with edits."))
    parts.append(ask)
    return system, "\n\n".join(p for p in parts if p)
