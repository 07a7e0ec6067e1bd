"""A judged candidate runs in the judge's process, and Python's introspection reaches every object
there: a frame (sys._getframe, inspect, a traceback's tb_frame, a generator's gi_frame) walks up to
the judge's own frames and their locals, the garbage collector (gc.get_objects / get_referrers)
finds any object, a trace or profile function is handed every frame, and ctypes reads and writes
memory by address. With
them a candidate can empty the record of its timed outputs before the verdict reads it, rewrite a
judgement's baselines, or read the expected answer (families 2-4 of issue 19).

`deny_to_candidates()` installs, once per process and before the first candidate is imported, an
audit hook (PEP 578) that refuses each of those operations, raising PermissionError, when the code
asking for it is not the judge's, torch's, Triton's or another installed package's: the nearest frame
outside the standard library (inspect, traceback and threading are walked past, so calling them does
not launder the request) must lie in a site-/dist-packages directory or in the autokernel package.
A candidate's file (a worktree, the kernel cache, a temporary file) never does, nor does code it
compiled itself ("<string>"). Python has no way to remove an audit hook, and the hook's state lives
only in its closure, which nothing but the interpreter's hook list refers to.

What is refused is recorded in `refusals()` for the verdict (best effort: the list is reachable, but a
candidate that empties it has still got nothing). Limits, as for integrity.py: code the candidate
compiles under a package's file name, or a candidate that reaches memory by other means than
ctypes, is not stopped here; the reference is never computed while the candidate runs, and the
sandbox keeps secrets out of reach. Nor are ctypes' unaudited entry points (ctypes.memmove,
ctypes.cast): with no frame or gc walk, a candidate has no address of the judge's objects to give them.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import threading

WATCHED = frozenset({"sys._getframe", "sys._getframemodulename", "sys._current_frames", "sys.settrace",
                     "sys.setprofile", "gc.get_objects", "gc.get_referrers", "gc.get_referents"})
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})

_installed: list[bool] = []
_refusals: list[str] = []
_start = [0]  # refusals before the judgement in progress


def refusals() -> list[str]:
    """What the hook refused in this process, oldest first ("sys._getframe from k_1a2b.py:31")."""
    return list(_refusals)


def start_judgement() -> None:
    """Before a judgement imports its candidate: the hook installed, and refusals counted from here."""
    deny_to_candidates()
    _start[0] = len(_refusals)


def refused() -> str | None:
    """The first refusal of the judgement in progress, worded for a verdict, or None."""
    if len(_refusals) > _start[0]:
        return f"a look into the judge's internals, refused: {_refusals[_start[0]]}"
    return None


def trusted_roots() -> tuple[str, ...]:
    """Where code that may introspect lives: installed packages and the autokernel package."""
    roots = set(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    roots.add(site.getusersitepackages() if hasattr(site, "getusersitepackages") else "")
    for key in ("purelib", "platlib"):
        roots.add(sysconfig.get_paths().get(key, ""))
    for entry in sys.path:  # dist-packages (Debian), a wheel target such as scripts/gpu.sh's
        if entry and os.path.isdir(entry) and (os.path.basename(entry) in ("site-packages", "dist-packages")
                                                or _holds_dist_info(entry)):
            roots.add(entry)
    import autokernel

    roots.add(os.path.dirname(os.path.abspath(autokernel.__file__)))
    both = {p for r in roots if r for p in (os.path.realpath(r), os.path.abspath(r))}
    return tuple(sorted(os.path.join(p, "") for p in both))


def _holds_dist_info(path: str) -> bool:
    try:
        return any(name.endswith(".dist-info") for name in os.listdir(path))
    except OSError:
        return False


def deny_to_candidates() -> None:
    """Install the hook in this process (once; later calls do nothing)."""
    if _installed:
        return
    _installed.append(True)
    lib = os.path.dirname(os.__file__)
    stdlib = tuple({os.path.join(os.path.realpath(lib), ""), os.path.join(os.path.abspath(lib), "")})
    sys.addaudithook(_make_hook(trusted_roots(), stdlib, _refusals))


def _make_hook(roots: tuple[str, ...], stdlib: tuple[str, ...], record: list):
    import logging

    watched, frame_attrs = WATCHED, FRAME_ATTRS
    logging_file, find_caller = logging.__file__, logging.Logger.findCaller.__code__
    getframe, get_ident = sys._getframe, threading.get_ident
    busy: set[int] = set()  # threads inside the hook: its own sys._getframe raises the event again

    def requester(frame):
        """The nearest frame outside the standard library (None when there is none)."""
        while frame is not None:
            name = frame.f_code.co_filename
            if not ((name.startswith(stdlib) and not name.startswith(roots)) or name.startswith("<frozen")):
                return frame
            frame = frame.f_back
        return None

    def logs(frame) -> bool:
        """logging's findCaller: it turns frames into a file name and a line number, nothing else
        (a candidate that logs a warning is not looking at the judge)."""
        back = frame.f_back
        return (frame.f_code.co_filename == logging_file and back is not None
                and back.f_code is find_caller)

    def hook(event: str, args: tuple) -> None:
        if event not in watched and not event.startswith("ctypes.") and not (
                event == "object.__getattr__" and len(args) > 1 and args[1] in frame_attrs):
            return
        me = get_ident()
        if me in busy:
            return
        busy.add(me)
        try:
            caller = getframe(1)
            if logs(caller):
                return
            who = requester(caller)
            if who is not None and who.f_code.co_filename.startswith(roots):
                return
            what = event if event != "object.__getattr__" else f"the {args[1]} of a {type(args[0]).__name__}"
            where = (f"{os.path.basename(who.f_code.co_filename)}:{who.f_lineno}" if who is not None
                     else "a thread of the standard library")
            record.append(f"{what} from {where}")
        finally:
            busy.discard(me)
        raise PermissionError(f"the judge refuses {what} to a candidate ({where})")

    return hook
