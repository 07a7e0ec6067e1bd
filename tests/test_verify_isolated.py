"""The loop's verify imports what the loop kept, code an LLM wrote: it runs in the bench's sandbox, not
in the loop's process that holds the LLM key, the network and the store (issue 19). A kept rmsnorm
that computes the right answer but first tries to read the key (its environment, any
/proc/<pid>/environ), connect to 127.0.0.1 and write into the store, the workspace and $HOME reaches
none of them and verifies; the result is recorded by the parent and says how the kernels ran. The
same kernel in this process reaches the key, so the probe can fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autokernel.bench.sandbox import probe

from test_sandbox import listener, probe_source  # noqa: F401 (listener: a fixture)

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
import torch

KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"

# reach.py


def kernel_fn(x, weight, eps):
    got = reached()
    if got:
        raise RuntimeError("verify probe: " + "; ".join(got))
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
'''

OPTS = {"batch": 1, "seq": 8, "dtype": "float32", "device": "cpu"}


def _setup(home, source: str) -> int:
    """llama-tiny profiled, one rmsnorm kernel with a kept experiment of `source`; the loop run's id."""
    from autokernel.store import Store
    from autokernel.workspace import Workspace

    entry = {"kernel_type": "rmsnorm", "label": "rmsnorm", "gpu_ms": 0.1, "share": 0.1, "calls": 1, "shapes": [],
             "weights": [], "dtype": "float32", "amdahl": 1.1, "gemm_ms": 0.0}
    ws = Workspace.open(home)
    with Store(home.db) as store:
        store.add_profile("llama-tiny", [entry], config=OPTS, device="cpu")
        ws.add_kernel("llama-tiny.rmsnorm", source, "the probe")
        k = store.add_kernel("llama-tiny.rmsnorm", "rmsnorm", model="llama-tiny", share=0.1,
                             branch=ws.branch_name("llama-tiny.rmsnorm"), base_commit=ws.head("llama-tiny.rmsnorm"),
                             dtype="float32")
        run = store.create_run("loop", model="llama-tiny")
        store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm", commit=ws.head(k.name),
                             status="kept", latency_us=10.0, speedup_vs_eager=2.0)
        return run.id


def _verify_from_a_keyed_process(home, run_id: int, secret: str, sandbox: bool) -> dict:
    """The loop's verify step, from a fresh Python whose initial environment holds the key."""
    script = textwrap.dedent(f"""
        import json
        from autokernel.loop_run import verify_run
        from autokernel.store import Store
        from autokernel.workspace import Workspace
        from autokernel.config import resolve_home

        home = resolve_home({str(home.home)!r})
        with Store(home.db) as store:
            data, error = verify_run(store, Workspace.open(home), {run_id}, lambda event: None)
        print(json.dumps({{"data": data, "error": error}}))
    """)
    env = {**os.environ, "OPENAI_API_KEY": secret, "AUTOKERNEL_HOME": str(home.home),
           "AUTOKERNEL_SANDBOX": "1" if sandbox else "0",
           # the repo first, then whatever the caller had (scripts/gpu.sh puts the wheels there)
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not probe().sandboxed, reason=f"no sandbox on this machine: {probe().detail}")
@pytest.mark.timeout(600)
def test_the_loops_verify_runs_kept_kernels_in_the_sandbox(home, tmp_path, listener, monkeypatch):  # noqa: F811
    from autokernel.store import Store

    user_home = tmp_path / "userhome"
    user_home.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    targets = [str(home.db), str(home.workspace), str(user_home)]
    secret = "sk-planted-" + os.urandom(6).hex()
    source = probe_source(PROBE, secret, listener, targets)
    run_id = _setup(home, source)
    got = _verify_from_a_keyed_process(home, run_id, secret, sandbox=True)
    assert got["error"] is None, got["error"]
    data = got["data"]
    (kernel,) = data["kernels"]
    assert kernel["ok"] and kernel["calls"] > 0, kernel["error"]
    assert data["ok"] and any("sandbox: no network" in n for n in data["notes"]), data["notes"]
    assert not (user_home / "planted.txt").exists() and not (home.workspace / "planted.txt").exists()
    assert b"planted" not in home.db.read_bytes()
    with Store(home.db) as store:  # recorded by the loop's process, not by the child
        rec = store.get_run(data["run_id"])
        assert rec.kind == "verify" and rec.status == "finished" and json.loads(rec.notes)["kernels"][0]["ok"]
    # the probe is real: in a process that holds the key it reaches it (and the listener)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    namespace: dict = {}
    exec(compile(source, "probe", "exec"), namespace)
    reached = namespace["reached"]()
    assert "read the key from OPENAI_API_KEY" in reached and f"connected to 127.0.0.1:{listener}" in reached
    assert (user_home / "planted.txt").exists()


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_gpu_the_sandboxed_verify_runs_the_kernels_on_the_gpu(home):
    """The sandbox keeps the GPU: the loop's verify plugs a starter into a bf16 LLaMA on the card."""
    from autokernel.extract import extract
    from autokernel.store import Store
    from autokernel.verify_isolated import verify_isolated
    from autokernel.workspace import Workspace

    entry = {"kernel_type": "rmsnorm", "label": "rmsnorm", "gpu_ms": 0.1, "share": 0.1, "calls": 1, "shapes": [],
             "weights": [], "dtype": "bfloat16", "amdahl": 1.1, "gemm_ms": 0.0}
    ws = Workspace.open(home)
    with Store(home.db) as store:
        store.add_profile("llama", [entry], config={"batch": 2, "seq": 256, "dtype": "bfloat16", "device": "cuda"})
        extract(store, ws, top=1)
        r = verify_isolated(store, ws, time_iters=2, with_compile=False)
        assert r.device != "cpu" and r.ok and not r.failed, [(v.name, v.error) for v in r.failed]
        (k,) = r.plugged
        assert k.kernel_type == "rmsnorm" and k.calls > 0 and k.fallbacks == 0
        assert any(("sandbox: no network" if probe().sandboxed else "none:") in n for n in r.notes), r.notes
        assert store.get_run(r.run_id).kind == "verify"


def test_verify_compiles_in_caches_of_its_own(tmp_path):
    """Judged candidates share the sandbox's compile caches, and one could plant a compiled kernel
    (or a slow compiled graph of the model) there: verify's child gets new, empty caches inside the
    sandbox's folder, removed afterwards; unsandboxed (no scratch caches), nothing changes."""
    from autokernel.verify_isolated import fresh_caches

    shared = tmp_path / "scratch" / "triton"
    shared.mkdir(parents=True)
    env = {"TRITON_CACHE_DIR": str(shared), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "scratch" / "inductor")}
    with fresh_caches(env):
        mine = [env[k] for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "AUTOKERNEL_CACHE_DIR",
                                 "TORCH_EXTENSIONS_DIR")]
        assert len(set(mine)) == 4 and all(os.path.isdir(p) and not os.listdir(p) for p in mine)
        assert all(os.path.dirname(os.path.dirname(p)) == str(tmp_path / "scratch") for p in mine)
        assert str(shared) not in mine
    assert not any(os.path.exists(p) for p in mine)
    plain = {"PATH": "/usr/bin"}
    with fresh_caches(plain):
        assert plain == {"PATH": "/usr/bin"}
