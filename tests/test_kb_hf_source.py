"""The KernelBench HF-dataset source, read from a real Hugging Face cache layout in a temp dir
(parquet files written with pyarrow, resolved by huggingface_hub offline): no network."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from autokernel.errors import KernelBenchError  # noqa: E402
from autokernel.kb.problems import HF_DATASET, SAMPLE_DIR, hf_snapshot, load_problems  # noqa: E402

SHA = "0123456789abcdef0123456789abcdef01234567"


def _write_cache(root, levels=(1, 2)):
    """The dataset as the hub cache holds it: datasets--ORG--NAME/{refs/main, snapshots/SHA/data/*.parquet}."""
    repo = root / ("datasets--" + HF_DATASET.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(SHA)
    data = repo / "snapshots" / SHA / "data"
    data.mkdir(parents=True)
    written = {}
    for lv in levels:
        rows = []
        for f in sorted((SAMPLE_DIR / f"level{lv}").glob("*.py"))[:3]:
            pid, name = f.stem.split("_", 1)
            rows.append({"code": f.read_text(), "level": lv, "name": f.stem, "problem_id": int(pid)})
        pq.write_table(pa.Table.from_pylist(rows), data / f"level_{lv}-00000-of-00001.parquet")
        written[lv] = rows
    return written


def test_problems_load_from_the_local_hf_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("KERNELBENCH_PATH", raising=False)
    written = _write_cache(tmp_path)
    assert hf_snapshot() == tmp_path / f"datasets--{HF_DATASET.replace('/', '--')}" / "snapshots" / SHA
    probs = load_problems("hf", level=2)
    assert [(p.level, p.problem_id, p.name, p.source) for p in probs] == [
        (2, r["problem_id"], r["name"].split("_", 1)[1], "hf") for r in sorted(written[2], key=lambda r: r["problem_id"])]
    assert all(p.code == r["code"] for p, r in zip(probs, sorted(written[2], key=lambda r: r["problem_id"])))
    # auto prefers the official set when only the HF cache has it
    first = written[1][0]
    [p] = load_problems("auto", level=1, ids=[first["problem_id"]])
    assert p.source == "hf" and p.kernel_name == f"kb.hf.L1.{first['problem_id']}"
    with pytest.raises(KernelBenchError, match="not found"):
        load_problems("hf", level=1, ids=[999])


def test_official_without_checkout_or_cache_names_both_ways(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.delenv("KERNELBENCH_PATH", raising=False)
    assert hf_snapshot() is None
    with pytest.raises(KernelBenchError) as exc:
        load_problems("official", level=1)
    assert "--kb-path" in exc.value.hint and HF_DATASET in exc.value.hint
