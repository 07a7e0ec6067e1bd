"""Whether a process recorded by pid still runs: what the workspace's worktree owner files and the
store's run locks use to tell a live holder from one a `kill -9` left behind. No torch, no git."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Optional


def process_start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks (Linux), to tell a reused PID from the owner."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces; fields after the closing paren are plain
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[:1] == ["Z"]


def this_process() -> dict:
    """The owner record of the calling process: pid, host and start time."""
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "start": process_start_time(pid)}


def owner_alive(owner: dict) -> bool:
    """Whether the process recorded in an owner record still runs. A process on another host can
    not be checked and counts as alive (never take what might be in use)."""
    if owner.get("host") not in (None, socket.gethostname()):
        return True
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    if _is_zombie(pid):
        return False
    recorded = owner.get("start")
    return recorded is None or process_start_time(pid) in (None, recorded)
