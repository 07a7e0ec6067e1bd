"""The caller's side of the bench: a worker subprocess that judges candidates, one at a time.

`BenchWorker` keeps one child alive across candidates (torch, CUDA context, Triton and
torch.compile caches, eager/compile baselines stay warm). From the caller's point of view each
candidate is still isolated: a hang is killed with the child's process group at the limit, a
crash (exception, signal, illegal memory access) is a result, and a child whose CUDA context
was poisoned is replaced before the next candidate. This module never imports torch.

Protocol: one JSON request per line on the child's stdin, one JSON reply per line on its
stdout (the child moves the candidate's own prints to stderr). stderr goes to a file, whose
tail becomes the error text of a crash or timeout.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from autokernel.bench.isolation import clean_env, describe_exit, kill_group
from autokernel.bench.result import COMPILE_ERROR, CRASHED, TIMEOUT, BenchResult
from autokernel.bench.sandbox import Isolation, importable_env, probe, sandboxed
from autokernel.errors import BenchError, KernelFileError
from autokernel.textfmt import tail

STARTUP_TIMEOUT_S = 180.0  # importing torch + triton (and creating a CUDA context) on a cold machine
GRACE_S = 5.0  # the child's own stage alarms fire first; the hard kill waits this much longer


class BenchWorker:
    """A long-lived judge process. Use as a context manager, or call close(). Subclasses run another
    child module (one that serves the same protocol, see worker.serve) by setting the class attributes."""

    module = "autokernel.bench.worker"  # the child: `python -m <module>`
    label = "the bench worker"  # how errors name the child
    log_prefix = "ak-bench-"  # the child's stderr file

    def __init__(self, *, env: Optional[dict[str, str]] = None, startup_timeout_s: float = STARTUP_TIMEOUT_S,
                 python: str = sys.executable):
        self._env = clean_env(env)
        self._startup_timeout = startup_timeout_s
        self._python = python
        self._proc: Optional[subprocess.Popen] = None
        self._stderr = None
        self._buf = b""
        self._info: dict[str, Any] = {}
        self.restarts = 0
        self._trusted = None  # bench/baselines.TrustedBaselines, started by the first GPU judgement
        self.isolation: Isolation = probe()  # what the candidates get; every result records it

    # -- process management -----------------------------------------------------------------

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile(prefix=self.log_prefix, suffix=".log")
        self._buf = b""
        argv, env, self.isolation = self.launch()
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, env=env, start_new_session=True, cwd=os.getcwd())
        hello = self._read_reply(self._startup_timeout)
        if not hello or not hello.get("ready"):
            err = self._stderr_tail(0)
            self._kill()
            raise BenchError(f"{self.label} did not start: {err or 'no output'}")
        self._info = hello
        if hello.get("isolation"):  # what the sandbox found from inside
            self.isolation = Isolation(True, hello["isolation"])
        self.restarts += 1

    def launch(self) -> tuple[list[str], dict[str, str], Isolation]:
        """The child's command, environment and isolation: in the sandbox where this machine has one
        (candidates' code runs there). A child that never runs candidate code may say otherwise."""
        return sandboxed([self._python, "-m", self.module], self._env)

    @property
    def info(self) -> dict[str, Any]:
        """The child's hello: device name, capability, versions, key, interpreted (starts it if needed)."""
        if not self.alive():
            self._kill()
            self._start()
        return self._info

    def _kill(self) -> None:
        if self._proc is not None:
            kill_group(self._proc)
            for stream in (self._proc.stdin, self._proc.stdout):
                try:
                    stream.close()
                except Exception:
                    pass
        self._proc = None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> Optional[int]:
        """The child's process id (None before it starts or after close)."""
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        if self.alive():
            try:
                self._proc.stdin.write(b'{"op": "exit"}\n')
                self._proc.stdin.flush()
                self._proc.wait(timeout=5)
            except Exception:
                pass
        self._kill()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._trusted is not None:
            self._trusted.close()
            self._trusted = None

    def __enter__(self) -> "BenchWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # a forgotten worker must not outlive its owner
        try:
            self._kill()
        except Exception:
            pass

    # -- I/O ------------------------------------------------------------------------------------

    def _stderr_pos(self) -> int:
        self._stderr.flush()
        return os.fstat(self._stderr.fileno()).st_size

    def _stderr_tail(self, since: int) -> str:
        try:
            self._stderr.seek(since)
            data = self._stderr.read().decode(errors="replace")
        except Exception:
            return ""
        return tail(data.strip())

    def _read_reply(self, timeout_s: float) -> Optional[dict]:
        """One JSON line from the child; {"eof": True} when it closed its end (died), None at the timeout."""
        deadline = time.monotonic() + timeout_s
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return {"eof": True}
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return {"garbled": line[-500:].decode(errors="replace")}

    def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request; returns the reply, or {"died"|"timeout": ..., "error": tail}."""
        if not self.alive():
            self._kill()
            self._start()
        since = self._stderr_pos()
        try:
            self._proc.stdin.write((json.dumps(payload) + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died between requests; the read below reports it
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_reply(max(0.0, deadline - time.monotonic()))
            if reply is None or "extend_s" not in reply:
                break
            # The bench's own work (eager / torch.compile baselines, ceilings) runs on its own clock:
            # the child announces it before (+) and returns what it did not use after (-).
            deadline += float(reply["extend_s"])
        if reply is not None and "garbled" not in reply and "eof" not in reply:
            if reply.get("restart"):  # e.g. a CUDA error poisoned the context
                self._kill()
            return reply
        if reply is None:
            self._kill()
            return {"timeout": True, "error": tail((f"killed after {timeout_s:.0f} s (plus the bench's own time)\n"
                                                   + self._stderr_tail(since)).strip())}
        code = None
        if self._proc is not None:
            try:
                code = self._proc.wait(timeout=5)  # it closed stdout: it is exiting
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        err = self._stderr_tail(since)
        return {"died": True, "error": tail(f"the bench worker {describe_exit(code)}\n{err}".strip())}

    # -- judging --------------------------------------------------------------------------------

    @staticmethod
    def reply_result(reply: dict[str, Any], kernel_type: str, backend: str) -> BenchResult:
        """The result a judge reply carries; a timeout or death of the child becomes a result, the
        bench's own failure (bench_error) is raised."""
        if "bench_error" in reply:
            raise BenchError(reply["bench_error"])
        if "result" in reply:
            return BenchResult.from_dict(reply["result"])
        return BenchResult(kernel_type=kernel_type, backend=backend,
                           outcome=TIMEOUT if reply.get("timeout") else CRASHED, error=reply.get("error"))

    def judge(self, kernel: str | Path | None = None, *, source: str | None = None, kernel_type: str | None = None,
              shapes: list[dict] | None = None, weights: list[float] | None = None, dtype: str | None = None,
              quick: bool = False, timeout_s: float = 600, baselines: bool = True,
              ceilings: dict[str, float] | None = None, gpu_compile: bool = False,
              programs: bool = False) -> BenchResult:
        """Judge one kernel file (path, or source text). Never raises for a bad kernel: every
        failure of the candidate is an outcome of the returned result. `gpu_compile`: on a machine
        without CUDA, a Triton kernel that passes the stages must also compile for sm_90.
        `programs`: also name the program it runs at each shape (bench/programs.py)."""
        t0 = time.monotonic()
        kf = self._parsed(kernel, source, kernel_type)
        if isinstance(kf, BenchResult):
            kf.duration_s = time.monotonic() - t0
            return kf
        source = kf.source
        payload = {"op": "judge", "source": source, "path": str(kernel) if kernel else None,
                   "kernel_type": kf.kernel_type, "backend": kf.backend, "config": kf.config,
                   "deterministic": kf.deterministic, "shapes": shapes, "weights": weights, "dtype": dtype,
                   "quick": quick, "timeout_s": timeout_s, "baselines": baselines, "ceilings": ceilings,
                   "gpu_compile": gpu_compile, "programs": programs}
        trusted = None
        if baselines and self.info.get("device") == "cuda":
            t_ask = time.monotonic()
            trusted = payload["trusted"] = self.trusted_numbers(kf.kernel_type, shapes, dtype)
            library_s = time.monotonic() - t_ask
        reply = self.request(payload, timeout_s + GRACE_S)
        res = self.reply_result(reply, kf.kernel_type, kf.backend)
        if trusted is not None:
            from autokernel.bench.baselines import settle

            settle(res, trusted, self.info.get("key", ""))
            # the library's eager and compiled timings (the trusted process caches them): first in the
            # judgement's phases, where a run's first judgement of a kernel spends most of its time
            res.extra["phases_s"] = {"library": round(library_s, 3), **(res.extra.get("phases_s") or {})}
        if "result" not in reply:
            res.extra["config"] = kf.config
            if reply.get("died") and self._proc is None:
                res.extra["worker_exit"] = "worker died"
        res.duration_s = time.monotonic() - t0
        res.extra["isolation"] = self.isolation.detail
        return res

    def trusted_numbers(self, kernel_type: str, shapes: list[dict] | None, dtype: str | None) -> dict[str, Any]:
        """The eager / torch.compile baselines and ceilings of these shapes from the trusted timing
        process (bench/baselines.py; started on first use, kept for the next judgements), or
        {"error": why}. Never timed in the judge's child, where the candidate runs."""
        from autokernel.bench.baselines import TrustedBaselines

        if self._trusted is None:
            self._trusted = TrustedBaselines(env=self._env, python=self._python)
        return self._trusted.numbers(kernel_type, shapes, dtype)

    @staticmethod
    def _parsed(kernel, source: str | None, kernel_type: str | None):
        """The kernel file parsed, or the result of a static failure (a syntax error or a missing
        kernel_fn needs no child: it is a compile error)."""
        if source is None:
            if kernel is None:
                raise BenchError("bench needs a kernel file or its source")
            try:
                source = Path(kernel).read_text()
            except OSError as exc:
                raise KernelFileError(f"cannot read kernel file {kernel}: {exc.strerror}") from exc
        from autokernel.kernelfile import parse_source

        try:
            kf = parse_source(source, Path(kernel) if kernel else None)
        except KernelFileError as exc:
            return BenchResult(kernel_type=kernel_type or "", backend="", outcome=COMPILE_ERROR, error=exc.one_line())
        if kernel_type and kf.kernel_type != kernel_type:
            raise BenchError(f"the kernel file says KERNEL_TYPE = {kf.kernel_type!r}, not {kernel_type!r}")
        return kf

    def screen(self, kernel: str | Path | None = None, *, source: str | None = None, kernel_type: str | None = None,
               shapes: list[dict] | None = None, dtype: str | None = None, timeout_s: float = 120,
               checked: bool = False, programs: list[dict] | None = None, **_judge_only) -> BenchResult:
        """The cheap screen (bench/screen.py): a smoke check, a check at shapes[0] (the kernel's
        heaviest model shape) and a short timing there; `checked`: the full judgement's timing there
        instead (refilled inputs, sampled outputs checked), for a comparison that decides a keep.
        `programs`: the best version's program per model shape, to say whether this one runs the same.
        Same calling convention as judge (options only the judgement has are ignored), so the CPU
        timing wrapper serves both. Never raises for a bad kernel."""
        t0 = time.monotonic()
        kf = self._parsed(kernel, source, kernel_type)
        if isinstance(kf, BenchResult):
            kf.duration_s = time.monotonic() - t0
            return kf
        payload = {"op": "screen", "source": kf.source, "path": str(kernel) if kernel else None,
                   "kernel_type": kf.kernel_type, "backend": kf.backend, "config": kf.config, "shapes": shapes,
                   "dtype": dtype, "timeout_s": timeout_s, "checked": checked, "programs": programs}
        res = self.reply_result(self.request(payload, timeout_s + GRACE_S), kf.kernel_type, kf.backend)
        res.extra["screen"] = True
        res.duration_s = time.monotonic() - t0
        res.extra["isolation"] = self.isolation.detail
        return res

    def calibrate(self, timeout_s: float = 300) -> dict[str, Any]:
        reply = self.request({"op": "calibrate"}, timeout_s)
        if "ceilings" not in reply:
            raise BenchError(f"calibration failed: {reply.get('error') or reply.get('bench_error')}")
        return reply


class TrustedWorker(BenchWorker):
    """A child that runs only trusted code (the references of specs or problems, never a candidate):
    started outside the sandbox, and asked with `ask`, whose failures are replies, not exceptions.
    Subclasses set `module`, `label`, `log_prefix` and `trusted` (what results record as isolation)."""

    trusted = "none: a trusted process (no candidate code)"

    def launch(self):
        return [self._python, "-m", self.module], importable_env(self._env), Isolation(False, self.trusted)

    def ask(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """The child's reply, or {"error": one line} when the request failed in the child (bench_error:
        its last line), or the child died or hung (the first and last lines of its output)."""
        reply = self.request(payload, timeout_s)
        if "bench_error" in reply:
            lines = str(reply["bench_error"]).strip().splitlines() or ["no output"]
            return {"error": lines[-1][:300]}
        if reply.get("died") or reply.get("timeout"):  # out of memory in the host, a segfault, a hang
            lines = str(reply.get("error") or "").strip().splitlines() or ["no output"]
            how = "timed out" if reply.get("timeout") else "died"
            return {"error": f"{how}: {lines[0][:150]}" + (f" ... {lines[-1][-150:]}" if len(lines) > 1 else "")}
        return reply


def bench_file(kernel: str | Path | None = None, *, source: str | None = None, kernel_type: str | None = None,
               shapes: list[dict] | None = None, weights: list[float] | None = None, dtype: str | None = None,
               quick: bool = False, timeout_s: float = 600, baselines: bool = True,
               ceilings: dict[str, float] | None = None, gpu_compile: bool = False) -> BenchResult:
    """Judge one kernel file in a fresh, one-shot worker process (see BenchWorker.judge)."""
    with BenchWorker() as worker:
        return worker.judge(kernel, source=source, kernel_type=kernel_type, shapes=shapes, weights=weights,
                            dtype=dtype, quick=quick, timeout_s=timeout_s, baselines=baselines, ceilings=ceilings,
                            gpu_compile=gpu_compile)
