"""The git workspace on real repositories in temp directories: keep, revert, stale cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import git
import pytest

from akfixtures import pythonpath

from autokernel.config import resolve_home
from autokernel.errors import NotFoundError, WorkspaceError
from autokernel.workspace import Workspace, sanitize

ROOT = Path(__file__).resolve().parents[1]
V1 = "BLOCK_SIZE = 128\n\ndef kernel_fn(x):\n    return x\n"
V2 = V1.replace("128", "256")
V3 = V1.replace("128", "512")



@pytest.fixture
def no_git_identity(tmp_path, monkeypatch):
    """A machine with no global or system git config: commits must still work."""
    fake_home = tmp_path / "userhome"
    fake_home.mkdir()
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
                "EMAIL", "GIT_CONFIG_GLOBAL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def ws(tmp_path, no_git_identity):
    return Workspace(tmp_path / "workspace", tmp_path / "worktrees")


def test_open_creates_repo_on_main_with_initial_commit(home, no_git_identity):
    ws = Workspace.open(home)
    repo = git.Repo(home.workspace)
    assert repo.active_branch.name == "main"
    assert len(list(repo.iter_commits("main"))) == 1
    # opening again reuses the repository instead of re-initialising it
    again = Workspace.open(resolve_home(home.home))
    assert again.root == ws.root
    assert len(list(git.Repo(home.workspace).iter_commits("main"))) == 1


def test_add_kernel_read_head_and_duplicate(ws):
    sha = ws.add_kernel("llama-7b.rmsnorm", V1, "starter kernel")
    assert ws.has_kernel("llama-7b.rmsnorm") and not ws.has_kernel("llama-7b.softmax")
    assert ws.branch_name("llama-7b.rmsnorm") == "kernels/llama-7b.rmsnorm"
    assert ws.head("llama-7b.rmsnorm") == sha
    assert ws.read("llama-7b.rmsnorm") == V1
    assert ws.read("llama-7b.rmsnorm", sha) == V1
    repo = git.Repo(ws.root)
    assert repo.commit(sha).parents[0] == repo.commit("main")
    assert repo.commit(sha).message.startswith("starter kernel")
    with pytest.raises(WorkspaceError):
        ws.add_kernel("llama-7b.rmsnorm", V2, "again")
    assert ws.read("llama-7b.rmsnorm") == V1
    with pytest.raises(NotFoundError):
        ws.head("nope")
    with pytest.raises(NotFoundError):
        ws.read("llama-7b.rmsnorm", "0123456789abcdef0123456789abcdef01234567")


def test_branch_names_are_valid_and_distinct(ws):
    names = ["a b", "a:b", "a..b", ".hidden", "x.lock", "kb.L1.19", "a/b", "a-b"]
    branches = {ws.branch_name(n) for n in names}
    assert len(branches) == len(names)
    for n in names:
        ws.add_kernel(n, V1, f"add {n}")
        assert ws.read(n) == V1
    assert sanitize("kb.L1.19") == "kb.L1.19"


def test_keep_fast_forwards_and_removes_worktree(ws):
    base = ws.add_kernel("k", V1, "starter")
    wt = ws.start_experiment("k", "k-e1")
    assert wt.is_dir() and wt.parent == ws.worktrees
    assert (wt / "kernel.py").read_text() == V1
    assert wt in ws.list_worktrees()
    sha = ws.commit_experiment(wt, V2, "block 256", "k-e1")
    assert ws.head("k") == base  # committing does not move the branch
    ws.keep("k", wt, sha)
    assert ws.head("k") == sha
    assert ws.read("k") == V2
    assert not wt.exists() and wt not in ws.list_worktrees()
    assert not list(ws.worktrees.iterdir())  # owner file gone too
    assert ws.experiment_refs("k") == {"k-e1": sha}
    assert git.Repo(ws.root).commit(sha).parents[0].hexsha == base


def test_revert_leaves_commit_reachable_by_sha(ws):
    base = ws.add_kernel("k", V1, "starter")
    ws.add_kernel("other", V1, "starter")
    wt = ws.start_experiment("k", "k-e2")
    sha = ws.commit_experiment(wt, V3, "block 512", "k-e2")
    ws.revert("k", wt, sha)
    assert ws.head("k") == base and ws.read("k") == V1
    assert not wt.exists()
    # an aggressive gc must not lose it: the experiment ref keeps it reachable
    git.Repo(ws.root).git.gc("--prune=now", "--quiet")
    assert ws.read("k", sha) == V3
    assert "block 512" in ws.show(sha) and "+BLOCK_SIZE = 512" in ws.show(sha)
    assert ws.experiment_refs() == {"k-e2": sha}
    assert ws.experiment_refs("other") == {}


def test_non_fast_forward_keep_is_refused(ws):
    ws.add_kernel("k", V1, "starter")
    wt_a = ws.start_experiment("k", "k-e1")
    wt_b = ws.start_experiment("k", "k-e2")
    sha_a = ws.commit_experiment(wt_a, V2, "a", "k-e1")
    sha_b = ws.commit_experiment(wt_b, V3, "b", "k-e2")
    ws.keep("k", wt_a, sha_a)
    with pytest.raises(WorkspaceError, match="fast-forward"):
        ws.keep("k", wt_b, sha_b)
    assert ws.head("k") == sha_a and ws.read("k") == V2
    ws.revert("k", wt_b, sha_b)
    assert ws.read("k", sha_b) == V3


def test_experiment_tag_is_never_moved(ws):
    ws.add_kernel("k", V1, "starter")
    wt = ws.start_experiment("k", "t1")
    sha = ws.commit_experiment(wt, V2, "first", "dup")
    ws.revert("k", wt)
    wt2 = ws.start_experiment("k", "t2")
    with pytest.raises(WorkspaceError, match="already names"):
        ws.commit_experiment(wt2, V3, "second", "dup")
    assert ws.experiment_refs()["dup"] == sha


def test_start_refuses_a_worktree_in_use(ws):
    ws.add_kernel("k", V1, "starter")
    ws.start_experiment("k", "e1")
    with pytest.raises(WorkspaceError, match="in use"):
        ws.start_experiment("k", "e1")


_CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from autokernel.workspace import Workspace
    ws = Workspace(Path(sys.argv[1]), Path(sys.argv[2]))
    wt = ws.start_experiment("k", "crash")
    print(wt, flush=True)
    time.sleep(600)
""")


def test_stale_worktree_of_killed_process_is_cleaned(ws, tmp_path):
    ws.add_kernel("k", V1, "starter")
    env = {**os.environ, "PYTHONPATH": pythonpath(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(ws.root), str(ws.worktrees)],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        stale = Path(child.stdout.readline().strip())
        assert stale.is_dir(), "the child did not create its worktree"
        # while the owner lives, its worktree is left alone
        assert ws.cleanup_stale() == []
        assert stale.is_dir()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
    mine = ws.start_experiment("k", "alive")
    orphan = ws.start_experiment("k", "no-owner")
    (orphan.parent / (orphan.name + ".owner.json")).unlink()

    removed = ws.cleanup_stale()

    assert sorted(removed) == sorted([stale, orphan])
    assert not stale.exists() and not orphan.exists()
    assert ws.list_worktrees() == [mine]
    registered = git.Repo(ws.root).git.worktree("list", "--porcelain")
    assert str(stale) not in registered and str(orphan) not in registered
    # the freed name can be used again, and the branch was never touched
    again = ws.start_experiment("k", "crash")
    assert again == stale and (again / "kernel.py").read_text() == V1
    assert ws.cleanup_stale() == []


def test_cleanup_removes_unregistered_leftover_folder(ws):
    ws.add_kernel("k", V1, "starter")
    ws.worktrees.mkdir(parents=True, exist_ok=True)
    junk = ws.worktrees / "k--half-made"
    junk.mkdir()
    (junk / "kernel.py").write_text(V2)
    dead = {"pid": 2 ** 22 + 12345, "host": None}  # beyond pid_max: surely not running
    (ws.worktrees / "k--half-made.owner.json").write_text(__import__("json").dumps(dead))
    assert ws.cleanup_stale() == [junk]
    assert not junk.exists() and not list(ws.worktrees.iterdir())


def test_workspace_on_a_file_is_an_error(tmp_path, no_git_identity):
    (tmp_path / "notgit").mkdir()
    (tmp_path / "notgit" / ".git").write_text("garbage")
    with pytest.raises(WorkspaceError):
        Workspace(tmp_path / "notgit", tmp_path / "wt")
