"""`autokernel kb score` and `kb list`: KernelBench metrics from the store alone (never imports torch).

Per level (and source):
- correctness rate: problems with a correct solution / every problem in the level;
- fast_p for p in {0, 0.5, 0.8, 1.0, 1.5, 2.0}, against eager and against torch.compile: problems
  whose best correct solution is faster than the baseline by a factor strictly greater than p,
  divided by every problem in the level (attempted or not), as KernelBench defines it;
- geometric-mean speed-up over the correct problems (vs eager, vs compile);
- degenerate problems (constant, below-tolerance or random reference output) are kept out of those
  numbers and reported apart; so are solutions flagged for review (over 10x the faster of eager and
  torch.compile after re-timing): they count as correct but not as fast.
The best solution of a problem is its fastest correct row that is on the kernel's branch
(baseline or kept), from any kb run; `export` writes that ModelNew file per problem.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

from autokernel.errors import KernelBenchError, NotFoundError

P_VALUES = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


def problem_meta(kernel) -> dict[str, Any]:
    """What the kb runner recorded about a problem's kernel (its shapes_json "kb" entry)."""
    try:
        data = json.loads(kernel.shapes_json or "{}")
    except json.JSONDecodeError:
        return {}
    return data.get("kb", {}) if isinstance(data, dict) else {}


def kb_kernels(store) -> list:
    return [k for k in store.list_kernels() if k.kernel_type == "kb"]


def best_row(rows: list) -> Optional[Any]:
    """Fastest correct row on the branch (baseline/kept); a correct row anywhere else if none."""
    ok = [e for e in rows if e.correctness == "PASS" and e.latency_us is not None]
    on_branch = [e for e in ok if e.status in ("kept", "baseline")]
    pool = on_branch or ok
    return min(pool, key=lambda e: (e.latency_us, e.id)) if pool else None


def problem_status(store, kernel) -> dict[str, Any]:
    rows = [e for e in store.list_experiments(kernel_id=kernel.id) if e.status not in ("running", "abandoned")]
    meta = problem_meta(kernel)
    best = best_row(rows)
    correct = any(e.correctness == "PASS" for e in rows)
    last_fail = next((e for e in reversed(rows) if e.correctness != "PASS"), None)
    return {"kernel": kernel.name, "level": meta.get("level"), "problem_id": meta.get("problem_id"),
            "name": meta.get("name"), "source": meta.get("source"), "size": meta.get("size", "default"),
            "start": meta.get("start"), "degenerate": meta.get("degenerate"), "attempted": bool(rows),
            "experiments": len(rows), "correct": correct,
            "latency_us": best.latency_us if best else None, "eager_us": best.eager_us if best else None,
            "compile_us": best.compile_us if best else None,
            "speedup_vs_eager": best.speedup_vs_eager if best else None,
            "speedup_vs_compile": best.speedup_vs_compile if best else None,
            "flagged": bool(best.flagged) if best else False, "device": best.device if best else None,
            "devices": sorted({e.device for e in rows if e.device}),
            "best_commit": best.commit if best else None, "best_experiment": best.id if best else None,
            "error": None if correct or last_fail is None else (last_fail.error or last_fail.status)[:300]}


def fast_p(speedups: list[Optional[float]], total: int, p: float) -> float:
    """Share of `total` problems whose speed-up is strictly greater than p (None: not correct)."""
    if total <= 0:
        return 0.0
    return sum(1 for s in speedups if s is not None and s > p) / total


def geomean(values: list[float]) -> Optional[float]:
    vals = [v for v in values if v and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def level_metrics(problems: list[dict], total: int) -> dict[str, Any]:
    """Metrics of one level. `problems`: problem_status dicts of the problems attempted; `total`:
    every problem in the level (the fast_p denominator), degenerate ones included here and
    subtracted below."""
    degenerate = [p for p in problems if p.get("degenerate")]
    main = [p for p in problems if not p.get("degenerate")]
    denom = max(0, total - len(degenerate))
    correct = [p for p in main if p["correct"]]
    flagged = [p for p in correct if p.get("flagged")]
    out: dict[str, Any] = {"problems": total, "scored": denom, "attempted": sum(1 for p in main if p["attempted"]),
                           "correct": len(correct), "correctness_rate": len(correct) / denom if denom else 0.0}
    for base in ("eager", "compile"):
        key = f"speedup_vs_{base}"
        speeds = [p[key] if p["correct"] and not p.get("flagged") else None for p in main]
        # fast_0 is the correctness rate (flagged ones included: correct, just not trusted as fast);
        # a correct solution without a measured baseline is never faster than p > 0
        zero = [1.0 if p["correct"] else None for p in main]
        fp = {}
        for p in P_VALUES:
            if p == 0.0:
                fp[str(p)] = fast_p(zero, denom, 0.0)
            else:
                fp[str(p)] = fast_p(speeds, denom, p)
        out[f"fast_p_vs_{base}"] = fp
        out[f"geomean_speedup_vs_{base}"] = geomean([p[key] for p in correct if not p.get("flagged") and p[key]])
    out["degenerate"] = [{"problem_id": p["problem_id"], "name": p["name"], "reason": p["degenerate"],
                          "correct": p["correct"], "speedup_vs_eager": p["speedup_vs_eager"]} for p in degenerate]
    out["flagged"] = [{"problem_id": p["problem_id"], "name": p["name"], "speedup_vs_eager": p["speedup_vs_eager"]}
                      for p in flagged]
    return out


def _level_problems(source: str, level: int, kb_path: Optional[str]) -> Optional[list[tuple[int, str]]]:
    """(id, name) of every problem of the level in its source, or None when the source is gone."""
    try:
        from autokernel.kb.problems import load_problems

        return [(p.problem_id, p.name) for p in load_problems(source, kb_path, level=level, size="default")]
    except Exception:  # the checkout or cache is gone: the level is every problem we know of
        return None


def _not_run(source: str, size: str, level: int, problem_id: int, name: str) -> dict[str, Any]:
    return {"kernel": None, "level": level, "problem_id": problem_id, "name": name, "source": source, "size": size,
            "start": None, "degenerate": None, "attempted": False, "experiments": 0, "correct": False,
            "latency_us": None, "eager_us": None, "compile_us": None, "speedup_vs_eager": None,
            "speedup_vs_compile": None, "flagged": False, "device": None, "devices": [], "best_commit": None,
            "best_experiment": None, "error": None}


def score(store, level: int | None = None, source: str | None = None) -> dict[str, Any]:
    """The scores of every (source, size, level) in the store, or one level."""
    from autokernel.kb.problems import source_label

    kernels = kb_kernels(store)
    if not kernels:
        raise NotFoundError("no KernelBench results in the store", hint="run `autokernel kb run --level N` first")
    kb_paths = {}
    for run in store.list_runs():
        if run.kind == "kb":
            cfg = json.loads(run.config_json or "{}")
            if cfg.get("kb_path"):
                kb_paths[cfg.get("source")] = cfg["kb_path"]
    groups: dict[tuple, list] = {}
    for k in kernels:
        st = problem_status(store, k)
        if level is not None and st["level"] != level:
            continue
        if source is not None and st["source"] != source:
            continue
        groups.setdefault((st["source"], st["size"], st["level"]), []).append(st)
    if not groups:
        raise NotFoundError("no KernelBench results in the store" + (f" for level {level}" if level else "")
                            + (f" from source {source}" if source else ""))
    devices = {d for g in groups.values() for p in g for d in p["devices"]}
    cpu = any("cpu" in d.lower() for d in devices)
    timing = ("CPU wall clock under the Triton interpreter: correctness is real, speed-ups are not GPU numbers"
              if cpu else "GPU, CUDA events (KernelBench protocol)" if devices else "no timed result yet")
    result = {"timing": timing,
              "devices": sorted(d for d in devices if d), "levels": []}
    for (src, size, lv), probs in sorted(groups.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "", kv[0][2] or 0)):
        listed = _level_problems(src, lv, kb_paths.get(src))
        total = max(len(probs), len(listed or []))
        m = level_metrics(probs, total)
        label = source_label(src)
        seen = {p["problem_id"] for p in probs}
        # problems of the level no run reached: in the table as "not run" (already in the denominator)
        rows = probs + [_not_run(src, size, lv, i, n) for i, n in listed or [] if i not in seen]
        m.update(source=src, source_label=label + ("" if size == "default" else f" (size {size})"), level=lv,
                 size=size, per_problem=sorted(rows, key=lambda p: p["problem_id"] or 0))
        result["levels"].append(m)
    return result


def export_best(store, workspace, out_dir: str | Path, level: int | None = None) -> list[Path]:
    """Write the best ModelNew of every problem with a correct solution: DIR/<source>/level<N>/<id>_<Name>.py,
    plus index.json."""
    out = Path(out_dir)
    written, index = [], []
    for k in kb_kernels(store):
        st = problem_status(store, k)
        if level is not None and st["level"] != level:
            continue
        if not st["correct"] or not st["best_commit"]:
            continue
        try:
            src = workspace.read(k.name, rev=st["best_commit"])
        except Exception as exc:
            raise KernelBenchError(f"cannot read the best solution of {k.name}: {exc}") from exc
        sub = out / (st["source"] or "kb") / (f"level{st['level']}" + ("" if st["size"] == "default" else f"_{st['size']}"))
        sub.mkdir(parents=True, exist_ok=True)
        path = sub / f"{st['problem_id']}_{st['name']}.py"
        path.write_text(src)
        written.append(path)
        index.append({**{k2: st[k2] for k2 in ("kernel", "level", "problem_id", "name", "source", "size", "latency_us",
                                               "speedup_vs_eager", "speedup_vs_compile", "flagged", "degenerate",
                                               "best_commit")}, "file": str(path.relative_to(out))})
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.json").write_text(json.dumps(index, indent=1, default=str))
    return written


def list_problems(store, problems: list) -> list[dict[str, Any]]:
    """The problems of a source with their status in the store."""
    rows = []
    for p in problems:
        k = store.find_kernel(p.kernel_name)
        st = problem_status(store, k) if k is not None else None
        if st is None or not st["attempted"]:
            status = "not run"
        elif st["correct"]:
            status = "correct"
        else:
            status = "incorrect"
        rows.append({"level": p.level, "problem_id": p.problem_id, "name": p.name, "source": p.source,
                     "status": status, "degenerate": st["degenerate"] if st else None,
                     "start": st["start"] if st else None, "experiments": st["experiments"] if st else 0,
                     "speedup_vs_eager": st["speedup_vs_eager"] if st else None,
                     "speedup_vs_compile": st["speedup_vs_compile"] if st else None,
                     "error": st["error"] if st else None})
    return rows
