"""Full sm_90a compiles of kernel launches recorded under the interpreter (autokernel.bench.gpu_compile's
record_launches), for tests that must show more than "lowers to Triton IR": each launch goes through
Triton's whole CUDA pipeline for sm_90 (its Hopper passes: pipelining, warp specialization, TMA
lowering) and ptxas -v for sm_90a, in a fresh process (this one has Triton in interpreter mode).
Per launch it reports shared memory, warps, spills and counts of wgmma, mma.sync, TMA loads and stores and
setmaxnreg (a warp-specialized program's register split), or the compiler's last error line."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

COMPILE_SCRIPT = r'''
import importlib.util, json, pickle, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource

out = []
mods = {}
for label, path, name, sig, consts, attrs, opts, programs in pickle.load(open(sys.argv[1], "rb")):
    if path not in mods:
        spec = importlib.util.spec_from_file_location(f"sm90_{len(mods)}", path)
        mods[path] = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mods[path]
        spec.loader.exec_module(mods[path])
    fn = getattr(mods[path], name)
    names = list(fn.arg_names)
    consts = dict(consts)
    if programs is not None and "PROGRAMS" in names:
        consts[(names.index("PROGRAMS"),)] = programs
    sig = {k: v.replace("fp16", "bf16") for k, v in sig.items()}  # what the model runs
    attrs = {k: [["tt.divisibility", 16]] for k in attrs}
    try:
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                           target=GPUTarget("cuda", 90, 32), options=dict(opts))
    except Exception as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        out.append({"label": label, "kernel": name, "error": lines[-1] if lines else type(e).__name__})
        continue
    ptx = k.asm["ptx"]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    p = get_ptxas(90)
    r = subprocess.run([getattr(p, "path", p), "-v", "--gpu-name=sm_90a", f.name, "-o", "/dev/null"],
                       capture_output=True, text=True)
    out.append({"label": label, "kernel": name, "ok": r.returncode == 0, "smem": k.metadata.shared,
                "warps": k.metadata.num_warps,
                "spill": sum(int(x) for x in re.findall(r"(\d+) bytes spill", r.stderr)),
                "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)),
                "mma": len(re.findall(r"mma\.sync\.aligned", ptx)),
                "tma_load": len(re.findall(r"cp\.async\.bulk\.tensor\.[2-5]d\.shared", ptx)),
                "tma_store": len(re.findall(r"cp\.async\.bulk\.tensor\.[2-5]d\.global", ptx)),
                "setmaxnreg": len(re.findall(r"setmaxnreg", ptx))})
print(json.dumps(out))
'''


def job(label: str, launch, programs: int | None = None) -> tuple:
    """One compile job from a recorded Launch; `programs` replaces a persistent kernel's PROGRAMS
    constexpr (the interpreter ran 3 programs, the H200 has 132 SMs)."""
    return (label, launch.path, launch.name, launch.signature, launch.constexprs, launch.attrs, launch.options,
            programs)


def compile_sm90(jobs: list[tuple], tmp_path: Path, timeout: int = 900) -> list[dict]:
    """Compile every job for sm_90a in a fresh process; one result dict per job, in order."""
    (tmp_path / "jobs.pkl").write_bytes(pickle.dumps(jobs))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT, str(tmp_path / "jobs.pkl")], capture_output=True,
                          text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(jobs)
    return results
