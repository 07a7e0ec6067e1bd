"""Where AutoKernel keeps its state: one home directory holding the database and the workspace."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from autokernel.errors import ConfigError

HOME_ENV = "AUTOKERNEL_HOME"
READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)  # what writing into a read-only place raises
DEFAULT_HOME = ".autokernel"


@dataclass(frozen=True)
class Paths:
    """All locations derived from the home directory; nothing else decides a path."""

    home: Path

    @property
    def db(self) -> Path:
        return self.home / "autokernel.db"

    @property
    def studies(self) -> Path:
        """The search's Optuna studies (SQLite), one per kernel, dtype and declared space."""
        return self.home / "studies.db"

    @property
    def workspace(self) -> Path:
        return self.home / "workspace"

    @property
    def worktrees(self) -> Path:
        return self.home / "worktrees"

    @property
    def cache(self) -> Path:
        return self.home / "cache"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    def ensure(self) -> "Paths":
        try:
            for p in (self.home, self.cache, self.logs):
                p.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if exc.errno in READ_ONLY_ERRNOS and self.home.is_dir():
                raise ConfigError(f"the AutoKernel home {self.home} is read-only ({exc.strerror}: {exc.filename})",
                                  hint="make it writable, or choose another with --home DIR or $AUTOKERNEL_HOME"
                                  ) from exc
            raise ConfigError(f"cannot create the AutoKernel home {self.home}: {exc.strerror}") from exc
        return self


def resolve_home(explicit: str | os.PathLike | None = None) -> Paths:
    """--home wins over $AUTOKERNEL_HOME, which wins over ./.autokernel."""
    raw = explicit or os.environ.get(HOME_ENV) or DEFAULT_HOME
    home = Path(raw).expanduser().resolve()
    if home.exists() and not home.is_dir():
        raise ConfigError(f"AutoKernel home {home} exists and is not a directory")
    return Paths(home)


def debug_enabled() -> bool:
    return os.environ.get("AUTOKERNEL_DEBUG", "") not in ("", "0", "false", "no")
