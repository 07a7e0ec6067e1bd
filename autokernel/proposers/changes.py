"""What an experiment changed, as a proposer should read it: the changed lines of its commit (so a
model sees what was tried, not a 100-character description), and a failed candidate's full diff
against the current file (so it can fix its slip). Reads the git workspace; plain text out.
"""

from __future__ import annotations

import difflib
from typing import Optional

CHANGE_LINES = 12  # changed lines shown per history row
FAILED_DIFF_LINES = 160  # lines of a failed candidate's diff


def commit_change(ws, sha: str, max_lines: int = CHANGE_LINES) -> Optional[str]:
    """The +/- lines of an experiment commit against its parent (the branch head it started from)."""
    try:
        shown = ws.show(sha)
    except Exception:  # a commit the workspace lost (never for pinned experiments): nothing to show
        return None
    lines = [ln for ln in shown.split("\n")
             if ln.startswith(("+", "-")) and not ln.startswith(("+++ ", "--- "))]
    if not lines:
        return "no change to kernel.py"
    more = len(lines) - max_lines
    return "\n".join(lines[:max_lines] + ([f"... ({more} more changed lines)"] if more > 0 else []))


def candidate_diff(current: str, candidate: str, max_lines: int = FAILED_DIFF_LINES) -> str:
    """Unified diff from the current kernel.py to a candidate, with three lines of context."""
    lines = list(difflib.unified_diff(current.splitlines(), candidate.splitlines(), "a/kernel.py",
                                      "b/kernel.py", lineterm=""))
    more = len(lines) - max_lines
    return "\n".join(lines[:max_lines] + ([f"... ({more} more diff lines)"] if more > 0 else []))
