"""Throughput and efficiency of a run's judges (issue 25), from the store alone: per judge (one GPU,
or one CPU worker, summed over the run's sessions) the candidates it judged, its busy and wall
time, candidates per GPU-hour and its idle share; per run, candidates per hour of wall clock (what
must scale with the number of GPUs) and per GPU-hour. `autokernel report --format md` and the
loop's summary show them. A run judged by one bench worker (no pool) has no judges rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from autokernel.orchestrator import VERDICTS, pooled_spans


@dataclass
class JudgeStats:
    run: int
    label: str  # "gpu 3", "cpu 1", ...
    device: str
    sessions: int = 0
    candidates: int = 0  # candidates it gave a verdict (starting points not counted)
    starting_points: int = 0
    busy_s: float = 0.0  # judging (its own references included)
    wall_s: float = 0.0  # from its start to its last sign of life, every session
    restarts: int = 0

    @property
    def idle_s(self) -> float:
        return max(0.0, self.wall_s - self.busy_s)

    @property
    def idle_pct(self) -> Optional[float]:
        return 100.0 * self.idle_s / self.wall_s if self.wall_s > 0 else None

    @property
    def per_gpu_hour(self) -> Optional[float]:
        return self.candidates * 3600.0 / self.wall_s if self.wall_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "idle_s": self.idle_s, "idle_pct": self.idle_pct, "per_gpu_hour": self.per_gpu_hour}


def judge_stats(store, run_id: Optional[int] = None) -> list[JudgeStats]:
    """One entry per judge of each pooled run (by label), in the order they were made."""
    judges = store.list_judges(run_id)
    if not judges:
        return []
    of_judge: dict[int, tuple[int, str]] = {}
    out: dict[tuple[int, str], JudgeStats] = {}
    for j in judges:
        key = (j.run_id, j.label)
        st = out.setdefault(key, JudgeStats(run=j.run_id, label=j.label, device=j.device or ""))
        st.sessions += 1
        st.busy_s += j.busy_s
        st.wall_s += max(0.0, ((j.last_seen_at or j.started_at) - j.started_at).total_seconds())
        st.restarts += j.restarts
        of_judge[j.id] = key
    for run in {j.run_id for j in judges}:
        for e in store.list_experiments(run_id=run):
            key = of_judge.get(e.judge_id)
            if key is None:
                continue
            if e.proposer == "baseline":
                out[key].starting_points += e.status != "abandoned"
            elif e.status in VERDICTS:
                out[key].candidates += 1
    return list(out.values())


def run_totals(store, run_id: int, stats: list[JudgeStats]) -> dict[str, Any]:
    """A pooled run's totals: candidates per hour of wall clock and per GPU-hour, idle share."""
    mine = [s for s in stats if s.run == run_id]
    wall = sum((b - a).total_seconds() for a, b in pooled_spans(store.list_judges(run_id)))
    gpu_s = sum(s.wall_s for s in mine)
    n = sum(s.candidates for s in mine)
    return {"run": run_id, "judges": len(mine), "candidates": n, "wall_s": wall,
            "per_hour": n * 3600.0 / wall if wall > 0 else None,
            "per_gpu_hour": n * 3600.0 / gpu_s if gpu_s > 0 else None,
            "idle_pct": 100.0 * sum(s.idle_s for s in mine) / gpu_s if gpu_s > 0 else None,
            "restarts": sum(s.restarts for s in mine)}


def _hm(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _n(v: Optional[float], spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def judges_md(store, run_id: Optional[int] = None) -> str:
    """The report's section on the judges of each pooled run (empty when no run had a pool)."""
    stats = judge_stats(store, run_id)
    lines: list[str] = []
    for run in sorted({s.run for s in stats}):
        t = run_totals(store, run, stats)
        lines += [f"## Judges of run {run}", "",
                  f"{t['judges']} judges: {t['candidates']} candidates in {_hm(t['wall_s'])} of wall clock, "
                  f"{_n(t['per_hour'])} per hour, {_n(t['per_gpu_hour'])} per GPU-hour; idle "
                  f"{_n(t['idle_pct'], '.0f')}% of the judges' time; {t['restarts']} worker restart(s).", "",
                  "| judge | device | candidates | starting points | per GPU-hour | busy | idle | restarts |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for s in (s for s in stats if s.run == run):
            lines.append(f"| {s.label} | {s.device} | {s.candidates} | {s.starting_points} | {_n(s.per_gpu_hour)} | "
                         f"{_hm(s.busy_s)} | {_n(s.idle_pct, '.0f')}% | {s.restarts} |")
        lines.append("")
    return "\n".join(lines)
