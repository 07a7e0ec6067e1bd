"""A process that runs the search proposer against a real store until killed (tests/test_search.py).

    python tests/support/search_worker.py HOME KERNEL_NAME N

Proposes, records each candidate as a running experiment, "judges" it with a deterministic
synthetic latency (fast at large BLOCK with VARIANT c), records the verdict; N experiments, then
exits 0. Printed after each verdict: the experiment number (the parent kills it mid-way)."""

import json
import sys
import time
from pathlib import Path

from autokernel.proposers import make_proposer
from autokernel.proposers.base import KernelContext
from autokernel.store import Store


def latency(cfg: dict) -> float:
    return 100.0 * (1 + abs([32, 64, 128, 256, 512].index(cfg["BLOCK"]) - 4)) * (1 if cfg["VARIANT"] == "c" else 3)


def main() -> int:
    home, name, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    store = Store(home / "autokernel.db")
    k = store.find_kernel(name)
    run = store.list_runs()[-1]
    store.abandon_running(run.id)  # what --resume does first
    source = (home / "kernel.py").read_text()
    proposer = make_proposer("search", store=store)
    ctx = KernelContext(name=k.name, kernel_type=k.kernel_type, backend="triton", dtype="float32", kernel_id=k.id)
    while len([e for e in store.list_experiments(run_id=run.id) if e.status == "reverted"]) < n:
        prop = proposer.propose(source, None, store.list_experiments(kernel_id=k.id), kernel=ctx)
        exp = store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type=k.kernel_type, status="running",
                                   proposer="search", config_json=json.dumps(prop.config, sort_keys=True))
        time.sleep(0.05)  # the "bench": a kill lands here or in the proposer
        store.update_experiment(exp.id, status="reverted", latency_us=latency(prop.config), duration_s=0.05)
        print(exp.number, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
