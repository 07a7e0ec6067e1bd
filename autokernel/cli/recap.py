"""The last screen of `autokernel loop`: what was optimized, what was verified, where the kernels
are and what to run next, rounded, in a dozen lines (a newcomer reads this and nothing else)."""

from __future__ import annotations

from typing import Any, Optional

from autokernel.cpu_timing import CPU_LABEL


def _elapsed(s: float) -> str:
    s = int(s or 0)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _rate(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.1f}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def kernel_line(k: dict[str, Any], width: int) -> str:
    """One kernel: its share, its best speed-up (over eager when measured, else over its start)."""
    if k.get("baseline_us") is None:
        result = "its starting kernel failed: not optimized"
    else:
        vs_eager = k["speedup"] != k["speedup_vs_baseline"]
        result = f"{k['speedup'] if vs_eager else k['speedup_vs_baseline']:.2f}x " \
                 f"{'eager' if vs_eager else 'its start'}, {k['kept']} kept"
    return f"  {k['name']:<{width}} {100 * k['share']:4.0f}% of the model  {result:<26} autokernel show {k['name']}"


def verify_lines(summary) -> list[str]:
    v = summary.verify
    if v is None:
        if summary.verify_error:
            return [f"verify failed: {summary.verify_error}"]
        return [] if summary.status == "interrupted" else ["not verified (--no-verify): run `autokernel verify`"]
    plugged = [k["name"] for k in v.get("kernels", []) if k.get("ok") and not k.get("slower")]
    rel = v.get("rel_error")
    match = (f"outputs match the original (rel. error {rel:.1e})" if v.get("ok")
             else f"MISMATCH: outputs differ from the original (rel. error {rel:.1e} > {v.get('tolerance', 0):g})")
    if not plugged:  # both timings would be of the same eager model: no speed-up to claim
        return [f"verified: {match}; nothing plugged in (no kernel kept that beat its start), "
                "so no model speed-up to measure"]
    lines = [f"verified: {match}; plugged in: {', '.join(plugged)}"]
    if v.get("speedup_vs_eager"):
        cpu = str(v.get("device", "cpu")).startswith("cpu")
        text = f"model speed-up: {v['speedup_vs_eager']:.2f}x eager"
        if v.get("speedup_vs_compile"):
            text += f", {v['speedup_vs_compile']:.2f}x torch.compile"
        if cpu:
            text += f" ({CPU_LABEL}: says nothing about a GPU)"
        if v.get("amdahl_prediction"):
            text += f"; Amdahl predicted {v['amdahl_prediction']:.2f}x"
        lines.append(text)
    return lines


def recap_lines(summary, log: Optional[str] = None) -> list[str]:
    """The recap of a finished (or interrupted) loop run, from its LoopSummary."""
    head = f"loop run {summary.run_id} on {summary.model}: {summary.status}" + \
        (f" ({summary.stop_reason})" if summary.stop_reason else "")
    counts = (f"{_plural(summary.experiments, 'experiment')} (+{summary.starting_points} starting points) in "
              f"{_elapsed(summary.elapsed_s)}, {summary.kept} kept")
    if summary.timing == "cpu":
        counts += f"; {CPU_LABEL}, in the Triton interpreter: they rank candidates, they are not GPU speed"
    lines = [head, counts]
    t = getattr(summary, "throughput", None)
    if t and t.get("judges"):
        lines.append(f"{_plural(t['judges'], 'judge')}: {_rate(t['per_hour'])} candidates per hour, "
                     f"{_rate(t['per_gpu_hour'])} per GPU-hour, idle {_rate(t['idle_pct'])}% of their time"
                     + (f", {_plural(t['restarts'], 'worker restart')}" if t.get("restarts") else ""))
    kernels = summary.kernels
    width = max((len(k["name"]) for k in kernels), default=0)
    lines += [kernel_line(k, width) for k in kernels]
    lines += verify_lines(summary)
    if summary.status == "interrupted":
        lines.append(f"interrupted: continue with `autokernel loop --resume {summary.run_id}`")
    improved = [k for k in kernels if k.get("kept")]
    best = max(improved or kernels, key=lambda k: k["speedup"], default=None)
    lines.append("next" + (f" (the run's log: {log})" if log else "") + ":")
    lines.append(f"  autokernel report --run {summary.run_id} --format md   per-kernel summary "
                 "(--format tsv: results.tsv, --plot progress.png)")
    if best is not None:
        lines.append(f"  autokernel export {best['name']} --repo-id ORG/NAME   a kernel in the Hugging Face kernels layout")
    lines.append("  import autokernel; autokernel.apply(model)   the kept kernels in your own PyTorch code")
    return lines
