"""Inside the sandbox, before the judge child starts: `python -m autokernel.bench.sandbox_enter SPEC -- CMD...`.

`unshare --user --map-root-user --net --pid --fork --mount --mount-proc` (sandbox.py) starts this
as root of a new user namespace, with no network, its own process ids and its own view of the
mounts (a fresh /proc that shows only the sandbox's processes, so no /proc/<pid>/environ of the
process holding the keys). Here, in that namespace:

1. every mount is remounted read-only (bind remounts keep each mount's nosuid/nodev/noexec, which
   the kernel insists on), except /proc, /sys, /dev and the scratch folder, bound writable first;
2. a second user and mount namespace is entered, which locks those mounts: root of the inner
   namespace can neither remount them writable nor unmount them to uncover what lies beneath
   (what a candidate running as root of the outer one could otherwise do);
3. the protected paths (the AutoKernel home, $HOME, the working directory) are checked to be
   unwritable, and the result goes into the child's environment (AUTOKERNEL_ISOLATION) as one
   line; then CMD replaces this process.

With `--check` instead of CMD it prints that line as JSON and exits: sandbox.probe() uses it.
Only the standard library is imported here: this runs before torch, for every judge child.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_NOATIME, MS_NODIRATIME, MS_REMOUNT, MS_BIND, MS_REC = 1024, 2048, 32, 4096, 16384
MS_RELATIME, MS_NOSYMFOLLOW = 1 << 21, 256
CLONE_NEWNS, CLONE_NEWUSER = 0x20000, 0x10000000
PR_SET_NO_NEW_PRIVS = 38
# statvfs flags that a bind remount must repeat (the kernel refuses to clear them in a user namespace)
_KEPT = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
         (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (getattr(os, "ST_RELATIME", 4096), MS_RELATIME),
         (getattr(os, "ST_NOSYMFOLLOW", 8192), MS_NOSYMFOLLOW))
_PSEUDO = ("/proc", "/sys", "/dev")

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(src: str | None, target: str, flags: int) -> None:
    if _libc.mount(src.encode() if src else None, target.encode(), None, ctypes.c_ulong(flags), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]))  # \040: space
    return sorted(set(points), key=lambda p: (p.count("/"), p))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def read_only_except(scratch: str) -> list[str]:
    """Remount everything read-only but the pseudo file systems and `scratch`; returns the mount
    points that could not be made read-only."""
    os.makedirs(scratch, exist_ok=True)
    _mount(scratch, scratch, MS_BIND | MS_REC)  # its own mount: the remounts below leave it writable
    failed = []
    for mp in _mount_points():
        if any(_under(mp, p) for p in _PSEUDO) or _under(mp, scratch):
            continue
        try:
            st = os.statvfs(mp)
        except OSError:
            continue  # hidden beneath another mount
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for bit, ms in _KEPT:
            if st.f_flag & bit:
                flags |= ms
        try:
            _mount(None, mp, flags)
        except OSError:
            failed.append(mp)
    return failed


def lock_mounts() -> None:
    """Enter a new user + mount namespace owned by this one: the mounts set up above become locked
    there (MNT_LOCK_READONLY, MNT_LOCKED). Ids map to themselves, so files look as they did."""
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def writable(paths: list[str]) -> list[str]:
    """Which of `paths` this process could still write into (access(2) reports EROFS)."""
    return [p for p in paths if os.path.exists(p) and os.access(p, os.W_OK)]


def network_reachable() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=0.5).close()
        return True
    except ConnectionRefusedError:
        return True  # the loopback answered: there is a network
    except OSError:
        return False


def enter(spec: dict) -> str:
    """Set the sandbox up; returns the one-line description of what holds."""
    failed = read_only_except(spec["scratch"])
    lock_mounts()
    still = writable(spec.get("protect", []))
    parts = ["sandbox: no network, own pid namespace, read-only file system except the scratch folder"]
    if failed:
        parts.append(f"could not make read-only: {', '.join(failed[:4])}")
    if still:
        parts.append(f"STILL WRITABLE: {', '.join(still[:4])}")
    if network_reachable():
        parts.append("NETWORK REACHABLE")
    return "; ".join(parts)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    try:
        line = enter(spec)
    except OSError as exc:
        line = f"sandbox set-up failed: {exc}"
        if argv[1:2] == ["--check"]:
            print(json.dumps({"ok": False, "isolation": line}))
            return 1
        raise
    if argv[1:2] == ["--check"]:
        # a mount that stays writable matters only where it holds a protected path (checked)
        ok = "STILL WRITABLE" not in line and "NETWORK" not in line
        print(json.dumps({"ok": ok, "isolation": line, "pid": os.getpid()}))
        return 0
    cmd = argv[argv.index("--") + 1:]
    os.environ["AUTOKERNEL_ISOLATION"] = line
    os.execvpe(cmd[0], cmd, os.environ)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
