"""The bench child: `python -m autokernel.bench.worker`. Reads JSON requests on stdin, answers one
JSON line each on its original stdout. Runs untrusted candidate code; the parent (runner.py)
holds the time limit and survives whatever happens here."""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import traceback
from typing import Callable


Handler = Callable[[dict, Callable[[dict], None]], dict]  # (request, send) -> the reply


def serve(handlers: dict[str, Handler]) -> int:
    """The child's side of the protocol, shared by every judge child (this one, kb.worker): a ready
    line with the environment, then one reply per request line from handlers[request["op"]]
    (which may send interim messages such as {"extend_s": ...} itself) until "exit" or EOF. A
    failure of a handler is the bench's own failure, answered as bench_error."""
    # The protocol keeps the real stdout; the candidate's prints go to stderr (the parent's log).
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    faulthandler.enable(file=sys.stderr)  # a segfault leaves a Python traceback in the error tail

    def send(obj) -> None:
        proto.write(json.dumps(obj, default=str) + "\n")
        proto.flush()

    import torch

    if not torch.cuda.is_available():
        # Triton decides at @jit time; it must be set before any kernel file is imported.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from autokernel.bench import judge
    from autokernel.bench.sandbox import isolation_here

    send({"ready": True, "isolation": isolation_here(), **judge.environment()})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except json.JSONDecodeError as exc:
            send({"bench_error": f"bad request: {exc}"})
            continue
        op = req.get("op")
        if op == "exit":
            break
        try:
            handler = handlers.get(op) if isinstance(op, str) else None
            send(handler(req, send) if handler is not None else {"bench_error": f"unknown op {op!r}"})
        except Exception:  # the bench's own failure, not the candidate's
            send({"bench_error": traceback.format_exc()[-3000:]})
    return 0


def _judge(req: dict, send) -> dict:
    from autokernel.bench import judge

    return judge.judge_request(req)


def _screen(req: dict, send) -> dict:
    from autokernel.bench import screen

    return screen.screen_request(req, notify=send)


def _calibrate(req: dict, send) -> dict:
    from autokernel.bench import judge
    from autokernel.bench.ceilings import measure_ceilings

    return {"ceilings": measure_ceilings(), **judge.environment()}


def main() -> int:
    return serve({"judge": _judge, "screen": _screen, "calibrate": _calibrate})


if __name__ == "__main__":
    sys.exit(main())
