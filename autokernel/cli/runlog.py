"""The log of a loop or kb run: every event the live display shows (it is transient on a terminal)
as a timestamped line in <home>/logs/<kind>-run<N>.log, appended to when the run is resumed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional


class RunLog:
    """An on_event callback writing the run's log; events before the run's id is known are kept
    until it is (the log is named after the run)."""

    def __init__(self, logs: Path, kind: str):
        self.logs, self.kind = Path(logs), kind
        self.path: Optional[Path] = None
        self._pending: list[str] = []
        self._fh = None

    def __call__(self, event) -> None:
        if event.kind == "state":  # the display's snapshot, not an event worth a line
            return
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {event.kind:<15} {event.message}\n"
        if self._fh is None and event.run_id is not None:
            self.path = self.logs / f"{self.kind}-run{event.run_id}.log"
            try:
                self.logs.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")
            except OSError:
                self.path, self._fh = None, False  # no log (read-only home): the run goes on
            else:
                self._fh.writelines(self._pending)
            self._pending.clear()
        if self._fh:
            self._fh.write(line)
            self._fh.flush()
        elif self._fh is None:
            self._pending.append(line)

    def close(self) -> None:
        if self._fh:
            self._fh.close()


def tee(*callbacks: Optional[Callable]) -> Callable:
    """One on_event callback calling each of `callbacks` (None ones skipped) in turn."""
    live = [c for c in callbacks if c is not None]

    def emit(event) -> None:
        for c in live:
            c(event)
    return emit
