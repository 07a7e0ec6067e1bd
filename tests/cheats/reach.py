"""What the sandbox probes try to reach, spliced by the tests (test_sandbox.probe_source) into
tests/cheats/bench/sandbox_probe.py, tests/cheats/kb/sandbox_probe.py and the kept kernel of
test_verify_isolated.py where they say `# reach.py`: the LLM key in the environment or in any
/proc/<pid>/environ, a socket to 127.0.0.1, a write into each of the test's files and folders (the
store, the workspace, $HOME). The test fills in the constants."""

import glob
import os
import socket

SECRET = "planted-secret"  # the test's key value
PORT = 9  # a server the test listens on, on 127.0.0.1
TARGETS = []  # files and folders the test owns


def reached() -> list[str]:
    got = [f"read the key from {name}" for name, value in os.environ.items() if value == SECRET]
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(path, "rb") as f:
                if SECRET.encode() in f.read():
                    got.append(f"read the key from {path}")
        except OSError:
            pass
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
        got.append(f"connected to 127.0.0.1:{PORT}")
    except OSError:
        pass
    for target in TARGETS:
        path = os.path.join(target, "planted.txt") if os.path.isdir(target) else target
        try:
            with open(path, "ab") as f:
                f.write(b"planted")
            got.append(f"wrote {path}")
        except OSError:
            pass
    return got
