"""The bench child: `python -m autokernel.bench.worker`. Reads JSON requests on stdin, answers one
JSON line each on its original stdout. Runs untrusted candidate code; the parent (runner.py)
holds the time limit and survives whatever happens here."""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import traceback


def main() -> int:
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

    send({"ready": True, **judge.environment()})
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
            if op == "judge":
                send(judge.judge_request(req, notify=send))
            elif op == "calibrate":
                from autokernel.bench.ceilings import measure_ceilings

                send({"ceilings": measure_ceilings(), **judge.environment()})
            else:
                send({"bench_error": f"unknown op {op!r}"})
        except Exception:  # the bench's own failure, not the candidate's
            send({"bench_error": traceback.format_exc()[-3000:]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
