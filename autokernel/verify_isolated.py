"""The loop's verify with the kept kernels out of reach of what they must not touch (issue 19).

What the loop keeps is code an LLM wrote; the judge ran it in the bench's sandbox, and verify at the
end of the run must not then import it into the loop's own process, which holds the LLM key (in its
memory and environment), the network and the store. So the loop's verify is split (autokernel.verify):
this process reads the plan (the model, its options, the kept kernels' sources) from the store and
the workspace, a child in the bench's sandbox (bench/sandbox.py: no network, no other process's
environment, a read-only file system, an allowlisted environment without credentials) loads the
model, plugs the kernels in, compares and times, and returns the result as JSON; this process then
records it. Where there is no sandbox the child still runs with the scrubbed environment, and the
result's notes say what isolation the kernels had.

    result = verify_isolated(store, workspace, run_id=7, only_kept=True, progress=print)

Protocol: the plan as one JSON object on the child's stdin; JSON lines on its stdout ({"progress"}
per step, then {"result"} or {"error", "kind"}); the kernels' own prints go to its stderr, whose
tail explains a child that died.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

from autokernel import errors
from autokernel.errors import AutoKernelError

TAIL_CHARS = 2000


def _child_env() -> dict[str, str]:
    """The scrubbed environment, with the Hugging Face cache where this process finds it (the
    sandbox moves $HOME and $XDG_CACHE_HOME to its scratch folder) and the hub offline."""
    from huggingface_hub import constants

    from autokernel.bench.isolation import clean_env

    return clean_env(extra={"HF_HOME": str(constants.HF_HOME), "HF_HUB_CACHE": str(constants.HF_HUB_CACHE),
                            "HF_HUB_OFFLINE": "1"})


# The compile caches a sandboxed child writes (sandbox.scratch_env): every judged candidate could
# write them too, and plant a compiled kernel under the key of a source it proposes later (or of the
# model's compiled graph, made slow: the baseline verify measures against). Verify compiles the kept
# kernels and both models from their sources, in caches of its own.
_CACHES = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "AUTOKERNEL_CACHE_DIR", "TORCH_EXTENSIONS_DIR")


@contextlib.contextmanager
def fresh_caches(env: dict[str, str]):
    """Point the child's compile caches at new folders next to the sandbox's (inside its one
    writable folder), removed afterwards. Unsandboxed, the child uses this process's caches."""
    parent = env.get("TRITON_CACHE_DIR")
    if not parent:
        yield
        return
    root = Path(tempfile.mkdtemp(prefix="verify-", dir=Path(parent).parent))
    try:
        for name in _CACHES:
            (root / name.lower()).mkdir()
            env[name] = str(root / name.lower())
        yield
    finally:
        shutil.rmtree(root, ignore_errors=True)


def verify_isolated(store: Any, workspace: Any, *, run_id: int | None = None, only_kept: bool = False,
                    progress: Optional[Callable[[str], None]] = None, record: bool = True,
                    **check_options: Any):
    """verify(store, workspace, run_id=..., only_kept=...) with the model and the kernels in a sandboxed
    child; `check_options` go to verify.check_plan (time_iters, with_compile, min_speedup, modes...).
    Raises the child's typed error, or AutoKernelError when it died."""
    from autokernel.bench.sandbox import sandboxed
    from autokernel.verify import VerifyResult, plan_verify, record_verify

    progress = progress or (lambda message: None)
    plan = plan_verify(store, workspace, run_id=run_id, only_kept=only_kept)
    argv, env, iso = sandboxed([sys.executable, "-m", "autokernel.verify_isolated"], _child_env())
    request = json.dumps({"plan": plan.to_dict(), "options": check_options})
    with fresh_caches(env), tempfile.TemporaryFile(prefix="ak-verify-") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                                start_new_session=True)
        reply: dict[str, Any] = {}
        try:
            proc.stdin.write(request.encode())
            proc.stdin.close()
            for line in proc.stdout:
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if "progress" in msg:
                    progress(str(msg["progress"]))
                else:
                    reply = msg
            proc.wait()
        finally:
            if proc.poll() is None:
                from autokernel.bench.isolation import kill_group

                kill_group(proc)
        err.seek(0)
        tail = err.read().decode(errors="replace").strip()[-TAIL_CHARS:]
    if "result" not in reply:
        if "error" in reply:
            kind = getattr(errors, str(reply.get("kind")), None)
            kind = kind if isinstance(kind, type) and issubclass(kind, AutoKernelError) else AutoKernelError
            raise kind(reply["error"])
        from autokernel.bench.isolation import describe_exit

        last = tail.splitlines()[-1] if tail else "no output"
        raise AutoKernelError(f"verify's sandboxed child {describe_exit(proc.returncode)}: {last[:300]}")
    result = VerifyResult.from_dict(reply["result"])
    result.notes.append(f"the kernels ran in a child process: {iso.detail}")
    if record:
        record_verify(store, result)
    return result


def main() -> int:
    """The child: read the plan, check it, answer on the saved stdout."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the kernels print must not garble the protocol

    def send(obj: dict) -> None:
        proto.write(json.dumps(obj, default=str) + "\n")
        proto.flush()

    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel file is imported
    from autokernel.verify import VerifyPlan, check_plan

    req = json.loads(sys.stdin.read())
    try:
        result = check_plan(VerifyPlan.from_dict(req["plan"]), progress=lambda m: send({"progress": m}),
                            **req.get("options", {}))
    except AutoKernelError as exc:
        send({"error": exc.one_line(), "kind": type(exc).__name__})
        return 0
    send({"result": result.to_dict()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
