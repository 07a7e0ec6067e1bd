"""What an LLM answer means: the file the rules ask for, or edits applied strictly to the current file.

The rules (prompts/rules.md) allow two kinds of answer:
- edits against the current kernel.py: SEARCH/REPLACE blocks, or a unified diff in a ```diff block.
  Each edit's old text must occur in the current file exactly, whitespace included; a SEARCH text
  must occur once, a diff hunk's old lines (context and removed) may occur several times, and then
  the hunk's line number picks the nearest. Line numbers and hunk counts are never trusted beyond
  that. An edit that does not apply is a failed answer (status edit_failed), never a guess;
- the whole file: one ```python block whose first line is `# FINAL kernel.py`.
An answer with neither, but exactly one python block that defines kernel_fn, is the whole file
(there is nothing to choose between). Anything else is not guessed at: several unmarked blocks are
`ambiguous` (an "old version for reference" must never be committed), none is `no_code`, a block
left open by a reply cut at its token budget is `truncated` (one left open by a model that stopped
by itself only lacks its closing fence), edits that leave the file as it was are `unchanged`. The error text says exactly what was wrong, for the next prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from autokernel.errors import ProposerError

FINAL_MARK = "# FINAL kernel.py"
_FINAL = re.compile(r"^\s*#\s*FINAL\b", re.IGNORECASE)
_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*?)[ \t]*$")
_SR = re.compile(r"^<{5,9} ?SEARCH[^\n]*\n(.*?)^={5,9}[ \t]*\n(.*?)^>{5,9} ?REPLACE[^\n]*$",
                 re.MULTILINE | re.DOTALL)
_SR_START = re.compile(r"^<{5,9} ?SEARCH", re.MULTILINE)
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")
_DESCRIPTION = re.compile(r"^\s*\**DESCRIPTION:?\**:?\s*(.+)$", re.MULTILINE | re.IGNORECASE)
_PY_INFO = ("", "python", "py", "python3")


class ReplyError(ProposerError):
    """An answer that gives no candidate; `status` is what the llm_calls row records."""

    def __init__(self, message: str, status: str):
        super().__init__(message)
        self.status = status


@dataclass
class Answer:
    source: str  # the new kernel.py
    form: str  # file | search_replace | diff
    description: str
    edits: int = 0  # how many edits were applied (0 for a whole file)


@dataclass
class Block:
    info: str  # the fence's info string, lower case ("python", "diff", "python final"...)
    body: str


def fenced_blocks(text: str) -> tuple[list[Block], Optional[Block]]:
    """The closed fenced blocks of a Markdown answer, and the block left open at the end, if any."""
    lines = (text or "").splitlines(keepends=True)
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i].rstrip("\n"))
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip().lower()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j].rstrip("\n")):
            j += 1
        body = "".join(lines[i + 1:j])
        if j == len(lines):
            return blocks, Block(info, body)
        blocks.append(Block(info, body))
        i = j + 1
    return blocks, None


def description_of(text: str) -> Optional[str]:
    """The DESCRIPTION line, preferably before the first code block."""
    head = (text or "").split("```", 1)[0]
    m = _DESCRIPTION.search(head) or _DESCRIPTION.search(text or "")
    return " ".join(m.group(1).strip().strip("*`").split())[:200] if m else None


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:120]


def _is_final(b: Block) -> bool:
    return "final" in b.info.split() or bool(_FINAL.match(b.body.lstrip("\n").split("\n", 1)[0]))


def _strip_final(body: str) -> str:
    lines = body.lstrip("\n").split("\n")
    return "\n".join(lines[1:]) if _FINAL.match(lines[0]) else "\n".join(lines)


def _is_diff(b: Block) -> bool:
    return b.info.split()[:1] in (["diff"], ["patch"], ["udiff"]) or bool(re.match(r"(--- |@@ )", b.body))


def apply_search_replace(current: str, text: str) -> tuple[str, int]:
    """Every SEARCH/REPLACE block of `text`, in order; each SEARCH text must occur exactly once."""
    pairs = list(_SR.finditer(text))
    if len(_SR_START.findall(text)) != len(pairs):
        raise ReplyError(f"{len(_SR_START.findall(text))} SEARCH markers but {len(pairs)} complete "
                         "SEARCH/=======/REPLACE blocks", "edit_failed")
    out = current
    for n, m in enumerate(pairs, 1):
        old, new = m.group(1), m.group(2)
        if not old.strip():
            raise ReplyError(f"edit {n}: its SEARCH part is empty", "edit_failed")
        count = out.count(old)
        if count != 1:
            where = "is not in the current kernel.py (it must match exactly, whitespace included)" if not count \
                else f"matches {count} places (include more lines to make it unique)"
            raise ReplyError(f"edit {n}: the SEARCH text starting {_first_line(old)!r} {where}", "edit_failed")
        out = out.replace(old, new, 1)
    return out, len(pairs)


def _hunks(diff: str) -> list[tuple[Optional[int], list[str], list[str]]]:
    """(stated old start, old lines, new lines) of each hunk of a unified diff."""
    hunks: list[tuple[Optional[int], list[str], list[str]]] = []
    cur = None
    lines = diff.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("@@"):
            m = _HUNK.match(line)
            cur = (int(m.group(1)) if m else None, [], [])
            hunks.append(cur)
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            cur = None  # a file header
        elif cur is None or line.startswith("+++ ") or line.startswith("\\"):
            continue
        elif line.startswith("-"):
            cur[1].append(line[1:])
        elif line.startswith("+"):
            cur[2].append(line[1:])
        elif line.startswith(" ") or line == "":
            cur[1].append(line[1:])  # an empty line is a blank context line (many writers drop its space)
            cur[2].append(line[1:])
        else:
            raise ReplyError(f"the diff has a line that is neither context, removal nor addition: {line[:80]!r}",
                             "edit_failed")
    return [(s, *_trim(old, new)) for s, old, new in hunks]


def _trim(old: list[str], new: list[str]) -> tuple[list[str], list[str]]:
    """Without the blank lines both sides end with: the block's last newline, not the file's."""
    while old and new and old[-1] == "" and new[-1] == "":
        old, new = old[:-1], new[:-1]
    return old, new


def apply_diff(current: str, diff: str) -> tuple[str, int]:
    """A unified diff's hunks, in order, each where its old lines match the file exactly."""
    hunks = _hunks(diff)
    if not hunks:
        raise ReplyError("the diff has no @@ hunk", "edit_failed")
    lines = current.split("\n")
    offset = 0
    for n, (start, old, new) in enumerate(hunks, 1):
        if not old:
            raise ReplyError(f"hunk {n} has no context or removed lines: include the lines around the change",
                             "edit_failed")
        places = [p for p in range(len(lines) - len(old) + 1) if lines[p:p + len(old)] == old]
        if not places:
            raise ReplyError(f"hunk {n} does not apply: its lines starting {_first_line(chr(10).join(old))!r} are "
                             "not in the current kernel.py (context and removed lines must match exactly)",
                             "edit_failed")
        want = (start - 1 + offset) if start else 0
        p = min(places, key=lambda q: abs(q - want))
        lines[p:p + len(old)] = new
        offset += len(new) - len(old)
    return "\n".join(lines), len(hunks)


def read_answer(text: str, current: str, finish_reason: Optional[str] = None) -> Answer:
    """The candidate an answer gives (see the module docstring), or ReplyError."""
    from autokernel.proposers.providers import TRUNCATED

    blocks, unclosed = fenced_blocks(text)
    cut = finish_reason in TRUNCATED
    description = description_of(text) or ""
    finals = [b for b in blocks if _is_final(b)]
    diffs = [b for b in blocks if _is_diff(b) and not _is_final(b)]
    has_sr = bool(_SR_START.search(text or ""))
    if unclosed is not None and cut:
        raise ReplyError("the answer was cut off at its token budget inside a code block (finish reason "
                         f"{finish_reason}): answer with edits, which are shorter", "truncated")
    if unclosed is not None:
        blocks.append(unclosed)  # the model stopped by itself: only the closing fence is missing
    if finals and (has_sr or diffs):
        raise ReplyError("the answer has both a final file and edits; give one of the two", "ambiguous")
    if len(finals) > 1:
        raise ReplyError(f"the answer has {len(finals)} blocks marked {FINAL_MARK!r}; give exactly one", "ambiguous")
    if finals:
        source, form, n = _strip_final(finals[0].body), "file", 0
    elif has_sr:
        (source, n), form = apply_search_replace(current, text), "search_replace"
    elif diffs:
        source, n = current, 0
        for d in diffs:
            source, k = apply_diff(source, d.body)
            n += k
        form = "diff"
    else:
        files = [b for b in blocks if " ".join(b.info.split()[:1]) in _PY_INFO and "def kernel_fn" in b.body]
        if len(files) > 1:
            raise ReplyError(f"the answer has {len(files)} python blocks and none is marked {FINAL_MARK!r} "
                             "on its first line; mark the one to judge", "ambiguous")
        if not files:
            if cut:
                raise ReplyError(f"the answer was cut off at its token budget (finish reason {finish_reason}) "
                                 "before any usable code: answer with edits, which are shorter", "truncated")
            raise ReplyError("the answer holds neither edits nor a python block with the kernel file", "no_code")
        source, form, n = files[0].body, "file", 0
    if not source.endswith("\n"):
        source += "\n"
    if source.strip() == current.strip():
        raise ReplyError("the answer leaves kernel.py exactly as it is", "unchanged")
    return Answer(source=source, form=form, description=description, edits=n)
