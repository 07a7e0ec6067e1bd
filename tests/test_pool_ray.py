"""Issue 25 on a local Ray cluster: `autokernel loop --ray local --workers 2` starts a cluster on
this machine that declares two (fake) GPUs, so its judges are Ray actors placed with num_gpus=1 as
on a real cluster, judging on the CPU. They judge a batch of candidates with nothing lost or
written twice, an actor killed under a candidate is replaced (the candidate crashed), and the run
resumes after kill -9 of its coordinator. Skipped where Ray is not installed (`autokernel[ray]`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_pool import POOL_KERNEL, judged_in_a_pool, kill_ours  # noqa: E402

# two candidates for two actors: a wrong one, and the one whose actor the test kills (the judges'
# timings in the run's frame, the same code on an actor, are test_pool.py's)
RAY_KERNEL = POOL_KERNEL.replace('CANDIDATES = ((128, "loop"), (256, "lazy"), (128, "off_by_one"), (256, "crash"))',
                                 'CANDIDATES = ((128, "off_by_one"), (256, "crash"))')


def kill_actor(store, pid: int, parent: int) -> None:
    """The crash candidate runs in the bench worker of a Ray actor (its judge row's pid): kill the
    actor, as a lost node would; its bench worker, left behind, goes too."""
    assert parent in {j.pid for j in store.list_judges()}
    assert kill_ours(parent, "ray::")
    kill_ours(pid, "autokernel.bench.worker")


@pytest.fixture
def ray_tmp(monkeypatch):
    """The test's clusters keep their sockets and logs in a folder of their own (short: socket paths
    are limited to 107 bytes), removed after."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="akray")
    monkeypatch.setenv("RAY_TMPDIR", path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_a_local_ray_cluster_survives_a_killed_actor_and_a_killed_coordinator(home, tmp_path, ray_tmp):
    assert RAY_KERNEL != POOL_KERNEL
    judged_in_a_pool(home, tmp_path, ["--ray", "local", "--workers", "2"], 2, kill_actor, kernel=RAY_KERNEL)
