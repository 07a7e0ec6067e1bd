"""The kernel workspace: one git repository inside the AutoKernel home, one branch per kernel.

An experiment is made in a detached git worktree at the branch head and committed there. Keeping
it fast-forwards the branch; reverting only removes the worktree. Every experiment commit gets a
ref `refs/autokernel/experiments/<tag>`, so a reverted commit stays reachable (never garbage
collected) and can be shown or re-run by its sha.

Several processes (one loop worker per GPU) may share the repository. Branches are created and
moved with `git update-ref` and an expected old value, so two writers never silently overwrite
each other; the kernel branches are never checked out, which is what makes moving them safe.

Each worktree has an owner file next to it (`<worktree>.owner.json`) naming the process that
made it. It is written before the worktree exists, so a concurrent `cleanup_stale()` never
mistakes a worktree being created for a stale one.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from autokernel.errors import NotFoundError, WorkspaceError
from autokernel.liveness import owner_alive, this_process

KERNEL_FILE = "kernel.py"
BRANCH_PREFIX = "kernels/"
EXPERIMENT_REFS = "refs/autokernel/experiments/"
PINNED_REFS = "refs/autokernel/commits/"
OWNER_SUFFIX = ".owner.json"
_ZERO = "0" * 40
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _git_module():
    # GitPython needs a git executable; without one its import fails with a confusing message.
    try:
        import git  # noqa: PLC0415

        return git
    except ImportError as exc:
        raise WorkspaceError(f"the workspace needs git and GitPython: {exc}",
                             hint="install git and `pip install gitpython`") from exc


def sanitize(name: str) -> str:
    """A git-ref-safe form of a kernel name or tag. Names that had to change get a short hash of
    the original appended, so two different names never share a branch."""
    safe = _SAFE.sub("-", name.strip())
    safe = re.sub(r"\.{2,}", ".", safe).strip(".-")
    if safe.endswith(".lock"):
        safe = safe[: -len(".lock")] + "-lock"
    if not safe:
        safe = "kernel"
    if safe != name:
        safe = f"{safe}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return safe


class Workspace:
    """The git repository at `root` (created if missing) and the folder its worktrees go in."""

    def __init__(self, root: Path, worktrees: Path):
        self.root = Path(root)
        self.worktrees = Path(worktrees)
        self._git = _git_module()
        self.repo = self._open_or_create()

    @classmethod
    def open(cls, paths) -> "Workspace":
        return cls(paths.workspace, paths.worktrees)

    # -- plumbing -------------------------------------------------------------------------------

    def _run(self, *args: str, cwd: Path | None = None, **kwargs) -> str:
        """Run `git ARGS` in the repository (or a worktree); git failures become WorkspaceError."""
        try:
            if cwd is None:
                return self.repo.git.execute(["git", *args], **kwargs)
            return self._git.Git(str(cwd)).execute(["git", *args], **kwargs)
        except self._git.GitCommandError as exc:
            detail = " ".join(str(exc.stderr or exc).split())[-400:]
            raise WorkspaceError(f"git {args[0]} failed: {detail}") from exc

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """An inter-process lock for the few steps git itself does not serialise."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        with open(self.root.parent / ".workspace.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _open_or_create(self):
        git = self._git
        try:
            with self._lock():
                if not (self.root / ".git").exists():
                    self.root.mkdir(parents=True, exist_ok=True)
                    repo = git.Repo.init(self.root, initial_branch="main")
                    self._configure(repo)
                    repo.git.commit("--allow-empty", "-m", "Initialise the AutoKernel workspace")
                    return repo
                repo = git.Repo(self.root)
                if repo.bare:
                    raise WorkspaceError(f"the workspace {self.root} is a bare repository")
                return repo
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise WorkspaceError(f"the workspace {self.root} is not a git repository: {exc}") from exc
        except git.GitCommandError as exc:
            raise WorkspaceError(f"cannot create the workspace {self.root}: {exc.stderr or exc}") from exc
        except OSError as exc:
            raise WorkspaceError(f"cannot create the workspace {self.root}: {exc}") from exc

    @staticmethod
    def _configure(repo) -> None:
        # local identity: commits must work on machines with no global git config
        with repo.config_writer() as cfg:
            cfg.set_value("user", "name", "AutoKernel")
            cfg.set_value("user", "email", "autokernel@localhost")
            cfg.set_value("commit", "gpgsign", "false")
            cfg.set_value("gc", "auto", "0")  # no surprise gc while other workers commit

    def _rev(self, ref: str) -> Optional[str]:
        try:
            return self.repo.git.execute(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"])
        except self._git.GitCommandError:
            return None

    # -- kernels --------------------------------------------------------------------------------

    def branch_name(self, kernel_name: str) -> str:
        return BRANCH_PREFIX + sanitize(kernel_name)

    def has_kernel(self, name: str) -> bool:
        return self._rev(f"refs/heads/{self.branch_name(name)}") is not None

    def kernels(self) -> list[str]:
        """The branch names (without the prefix) of every kernel in the workspace."""
        out = self._run("for-each-ref", "--format=%(refname:strip=3)", "refs/heads/kernels/")
        return [line for line in out.splitlines() if line]

    def _commit_source(self, name: str, source: str, message: str, parent: Optional[str]) -> str:
        """A commit whose tree is `source` as kernel.py, on `parent` (none: a root commit), made
        with plumbing, not a checkout: the main worktree is never touched and other workers may be
        committing at the same time. No ref moves."""
        with _stdin(source) as fh:
            blob = self._run("hash-object", "-w", "--stdin", istream=fh)
        with _stdin(f"100644 blob {blob}\t{KERNEL_FILE}\n") as fh:
            tree = self._run("mktree", istream=fh)
        with _stdin(_message(message, name)) as fh:
            return self._run("commit-tree", tree, *(["-p", parent] if parent else []), istream=fh)

    def add_kernel(self, name: str, source: str, message: str) -> str:
        """Create the kernel's branch from `main` with `source` as kernel.py; returns the commit."""
        branch = self.branch_name(name)
        if self.has_kernel(name):
            raise WorkspaceError(f"kernel {name!r} already exists in the workspace (branch {branch})")
        sha = self._commit_source(name, source, message, self._rev("refs/heads/main"))
        try:
            self._run("update-ref", f"refs/heads/{branch}", sha, _ZERO)
        except WorkspaceError as exc:
            raise WorkspaceError(f"kernel {name!r} already exists in the workspace (branch {branch})") from exc
        return sha

    def advance(self, name: str, source: str, message: str, expected_head: str) -> str:
        """Commit `source` as kernel.py on top of the branch head, which must still be
        `expected_head` (a compare-and-swap, as in keep); returns the new commit."""
        sha = self._commit_source(name, source, message, expected_head)
        try:
            self._run("update-ref", f"refs/heads/{self.branch_name(name)}", sha, expected_head)
        except WorkspaceError as exc:
            raise WorkspaceError(f"kernel {name!r}: the branch moved from {expected_head[:12]} while its "
                                 "start was being replaced") from exc
        return sha

    def head(self, name: str) -> str:
        sha = self._rev(f"refs/heads/{self.branch_name(name)}")
        if sha is None:
            raise NotFoundError(f"kernel {name!r} has no branch in the workspace {self.root}")
        return sha

    def read(self, name: str, rev: str | None = None) -> str:
        """kernel.py at the kernel's branch head, or at any commit `rev` (a sha or ref)."""
        commit = self.head(name) if rev is None else self._rev(rev)
        if commit is None:
            raise NotFoundError(f"commit {rev!r} not found in the workspace {self.root}")
        return self._run("show", f"{commit}:{KERNEL_FILE}", strip_newline_in_stdout=False)

    def show(self, sha: str) -> str:
        """The commit as `git show` prints it: message and the change to kernel.py."""
        if self._rev(sha) is None:
            raise NotFoundError(f"commit {sha!r} not found in the workspace {self.root}")
        return self._run("show", "--no-color", sha)

    # -- experiments ----------------------------------------------------------------------------

    def start_experiment(self, name: str, tag: str) -> Path:
        """A detached worktree at the kernel's branch head, owned by this process."""
        head = self.head(name)
        self.worktrees.mkdir(parents=True, exist_ok=True)
        path = self.worktrees / f"{sanitize(name)}--{sanitize(tag)}"
        owner_file = _owner_file(path)
        if path.exists() or owner_file.exists():
            owner = _read_owner(owner_file)
            if owner is not None and owner_alive(owner):
                raise WorkspaceError(f"worktree {path} is in use by process {owner.get('pid')}")
            self._remove_worktree(path)
        owner = {**this_process(), "kernel": name, "tag": tag, "created": time.time()}
        owner_file.write_text(json.dumps(owner))
        try:
            self._run("worktree", "add", "--detach", str(path), head)
        except WorkspaceError:
            owner_file.unlink(missing_ok=True)
            raise
        return path

    def commit_experiment(self, worktree: Path, source: str, message: str, tag: str) -> str:
        """Write kernel.py in the worktree, commit it, pin the commit under its experiment ref."""
        worktree = Path(worktree)
        if not (worktree / ".git").exists():
            raise WorkspaceError(f"{worktree} is not an experiment worktree")
        owner = _read_owner(_owner_file(worktree)) or {}
        (worktree / KERNEL_FILE).write_text(source)
        self._run("add", KERNEL_FILE, cwd=worktree)
        # --allow-empty: a candidate identical to its parent is still an experiment with a sha
        self._run("commit", "--allow-empty", "--no-verify", "-q", "-m",
                  _message(message, owner.get("kernel"), tag), cwd=worktree)
        sha = self._run("rev-parse", "HEAD", cwd=worktree)
        ref = EXPERIMENT_REFS + sanitize(tag)
        existing = self._rev(ref)
        if existing is not None and existing != sha:
            # never move an experiment ref: the old commit would become unreachable
            raise WorkspaceError(f"experiment tag {tag!r} already names commit {existing[:12]}")
        self._run("update-ref", ref, sha)
        return sha

    def _head_and_target(self, name: str, sha: str) -> tuple[str, str, bool]:
        """The branch head, the commit `sha` names, and whether the head is its ancestor."""
        head = self.head(name)
        target = self._rev(sha)
        if target is None:
            raise NotFoundError(f"commit {sha!r} not found in the workspace {self.root}")
        try:
            self.repo.git.execute(["git", "merge-base", "--is-ancestor", head, target])
        except self._git.GitCommandError:
            return head, target, False
        return head, target, True

    def keep(self, name: str, worktree: Path, sha: str) -> None:
        """Fast-forward the kernel's branch to `sha` and drop the worktree."""
        branch = f"refs/heads/{self.branch_name(name)}"
        head, target, forward = self._head_and_target(name, sha)
        if not forward:
            raise WorkspaceError(f"refusing to keep {target[:12]} for {name!r}: not a fast-forward of the "
                                 f"branch head {head[:12]} (the branch moved since the experiment started)")
        # the expected old value makes this a compare-and-swap against a concurrent keep
        self._run("update-ref", branch, target, head)
        self._remove_worktree(Path(worktree))

    def keep_latest(self, name: str, worktree: Path, sha: str) -> str:
        """Make candidate `sha` the kernel's version and drop the worktree; returns the new head.
        A fast-forward (keep) when the branch head is its ancestor; else, for a candidate made from
        an older head that beats every keep since (a pool's judges finish out of order), a commit
        of its kernel.py on top of the head (the experiment's own commit stays under its ref)."""
        head, target, forward = self._head_and_target(name, sha)
        if forward:
            self.keep(name, worktree, target)
            return target
        new = self._commit_source(name, self.read(name, target), f"keep {target[:12]}, judged from an "
                                  f"older head than {head[:12]}", head)
        self._run("update-ref", f"refs/heads/{self.branch_name(name)}", new, head)  # compare-and-swap
        self._remove_worktree(Path(worktree))
        return new

    def same_content(self, a: str, b: str) -> bool:
        """Whether two commits hold the same kernel.py (the same tree)."""
        try:
            ta, tb = (self._run("rev-parse", "--verify", "--quiet", f"{c}^{{tree}}") for c in (a, b))
        except WorkspaceError:
            return False  # one of them is not a commit here
        return ta == tb

    def revert(self, name: str, worktree: Path, sha: str | None = None) -> None:
        """Drop the worktree; the commit (if any) stays reachable by its ref."""
        if sha is not None:
            target = self._rev(sha)
            if target is not None and not self._run("for-each-ref", "--points-at", target, "refs/autokernel/"):
                self._run("update-ref", PINNED_REFS + target, target)
        self._remove_worktree(Path(worktree))

    def experiment_refs(self, name: str | None = None) -> dict[str, str]:
        """tag -> sha of every experiment commit (of one kernel when `name` is given)."""
        out = self._run("for-each-ref", "--format=%(objectname) %(refname)", EXPERIMENT_REFS)
        refs = {}
        for line in out.splitlines():
            sha, ref = line.split(" ", 1)
            refs[ref[len(EXPERIMENT_REFS):]] = sha
        if name is None or not refs:
            return refs
        # one git call for all commit messages, however many experiments there are
        with _stdin("\n".join(set(refs.values())) + "\n") as fh:
            logs = self._run("log", "--no-walk=unsorted", "--stdin", "--format=%H%x1f%B%x1e", istream=fh)
        kernel_of = {}
        for entry in logs.split("\x1e"):
            sha, _, body = entry.strip().partition("\x1f")
            kernel_of[sha] = next((line[len("Kernel: "):].strip() for line in reversed(body.splitlines())
                                   if line.startswith("Kernel: ")), None)
        return {tag: sha for tag, sha in refs.items() if kernel_of.get(sha) == name}

    # -- worktree housekeeping ------------------------------------------------------------------

    def list_worktrees(self) -> list[Path]:
        """Registered worktrees under the worktrees folder."""
        out = self._run("worktree", "list", "--porcelain")
        found = []
        base = self.worktrees.resolve() if self.worktrees.exists() else self.worktrees
        for line in out.splitlines():
            if line.startswith("worktree "):
                p = Path(line[len("worktree "):])
                if p.parent == base or p.parent == self.worktrees:
                    found.append(p)
        return found

    def cleanup_stale(self) -> list[Path]:
        """Remove worktrees whose owner process is gone (or that have no owner file)."""
        removed = []
        with self._lock():
            candidates = set(self.list_worktrees())
            if self.worktrees.exists():
                for entry in self.worktrees.iterdir():
                    if entry.name.endswith(OWNER_SUFFIX):
                        candidates.add(entry.with_name(entry.name[: -len(OWNER_SUFFIX)]))
                    elif entry.is_dir():
                        candidates.add(entry)
            for path in sorted(candidates):
                owner = _read_owner(_owner_file(path))
                if owner is not None and owner_alive(owner):
                    continue
                self._remove_worktree(path)
                removed.append(path)
        return removed

    def _remove_worktree(self, path: Path) -> None:
        if (path / ".git").exists():
            try:
                self._run("worktree", "remove", "--force", "--force", str(path))
            except WorkspaceError:
                pass  # fall through to deleting the folder; prune forgets it below
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
        _owner_file(path).unlink(missing_ok=True)
        self._run("worktree", "prune")


def _stdin(text: str):
    """GitPython hands `istream` straight to Popen, which needs a real file descriptor."""
    import tempfile

    fh = tempfile.TemporaryFile()
    fh.write(text.encode())
    fh.seek(0)
    return fh


def _message(message: str, kernel: str | None, tag: str | None = None) -> str:
    subject = message.strip() or "experiment"
    trailers = [f"Kernel: {kernel}"] if kernel else []
    if tag:
        trailers.append(f"Experiment: {tag}")
    return subject + ("\n\n" + "\n".join(trailers) if trailers else "") + "\n"


def _owner_file(worktree: Path) -> Path:
    return worktree.with_name(worktree.name + OWNER_SUFFIX)


def _read_owner(path: Path) -> Optional[dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
