"""Compile, for a GPU target, the Triton kernels that a call launched under the interpreter.

The interpreter (`TRITON_INTERPRET=1`, how CI checks kernels on a CPU) runs a kernel's Python
body with numpy, so it accepts programs that Triton's compiler rejects: a loop that rebinds a name
to a block of another shape, a constexpr used as a runtime value, an unsupported op. Such a kernel
passes every CPU test and fails on the card. This module records each launch made inside
`record_launches()` (the kernel's file and name, its argument types, its constexprs) and lowers
it to Triton IR for sm_90 through the CUDA backend's front end: no GPU, driver or ptxas is needed
for that stage, and it is the stage where those errors are raised.

A kernel is also lowered as torch.compile launches it. Inductor types a Python float argument fp64
where Triton's own launcher types it fp32 (a Liger PR measured rms_norm at half speed from it:
the whole row's math follows the scalar to fp64), and an fp64 scalar can break a kernel outright:
the flash_attention starter's `tl.dot(p, v, acc)` failed Inductor's compile in LLaMA-7B's verify
(H100, 2026-12-06) once its scale made the accumulator fp64. `inductor_signature` gives that typing;
`compile_for_gpu(..., as_compiled=True)` lowers both, and `fp64_ops` counts the fp64 arithmetic
left in the torch.compile version (0 for a kernel that casts its float arguments on entry).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from dataclasses import dataclass, field

_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion"}


class GpuCompileError(RuntimeError):
    """A recorded kernel does not compile for the GPU target."""


@dataclass
class Launch:
    path: str  # the file of the kernel's module
    name: str  # the kernel's name there
    signature: dict
    constexprs: dict
    attrs: dict = field(default_factory=dict)  # (arg index,) -> Triton's specialization string ("D")
    options: dict = field(default_factory=dict)

    @property
    def key(self):
        return (self.path, self.name, tuple(self.signature.items()), tuple(sorted(self.constexprs.items(), key=str)),
                tuple(sorted(self.attrs.items())), tuple(sorted(self.options.items())))


def _launch(fn, args, kwargs):
    """The launch as the GPU's launcher would specialize it: Triton's own specialization of each
    argument (an int equal to 1 becomes a constexpr, pointers and ints divisible by 16 are marked
    so), so the IR compiled here is the IR the card would compile."""
    import inspect

    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    params = list(inspect.signature(fn).parameters.values())
    bound = dict(zip((p.name for p in params), args))
    bound.update({k: v for k, v in kwargs.items() if k not in _LAUNCH_OPTIONS})
    signature, constexprs, attrs = {}, {}, {}
    for i, p in enumerate(params):
        value = bound.get(p.name, p.default)
        if value is inspect.Parameter.empty:
            raise GpuCompileError(f"{fn.__name__}: no value for argument {p.name}")
        if "constexpr" in str(p.annotation) or value is None:
            signature[p.name], constexprs[(i,)] = "constexpr", value
            continue
        try:
            kind, attr = native_specialize_impl(BaseBackend, value, False, True, True)
        except Exception as e:  # a type the launcher does not take either
            raise GpuCompileError(f"{fn.__name__}: cannot pass argument {p.name} of {type(value).__name__}") from e
        if kind == "constexpr":
            signature[p.name], constexprs[(i,)] = "constexpr", attr
        else:
            signature[p.name] = kind
            if attr:
                attrs[(i,)] = attr
    options = {k: v for k, v in kwargs.items() if k in _LAUNCH_OPTIONS}
    return Launch(fn.__code__.co_filename, fn.__name__, signature, constexprs, attrs, options)


class record_launches:
    """A context manager whose `with` value is a list that fills with one Launch per distinct kernel
    launch made inside it. The launches still run (under the interpreter), so the block computes its
    real results. Leaving it twice is harmless (the bench leaves it on success and on error)."""

    def __init__(self):
        self.launches: list[Launch] = []
        self._seen: set = set()
        self._original = None

    def __enter__(self) -> list:
        from triton.runtime.interpreter import InterpretedFunction

        original = self._original = InterpretedFunction.run
        launches, seen = self.launches, self._seen

        def run(fn_self, *args, grid, warmup, **kwargs):
            rec = _launch(fn_self.fn, args, kwargs)
            if rec.key not in seen:
                seen.add(rec.key)
                launches.append(rec)
            return original(fn_self, *args, grid=grid, warmup=warmup, **kwargs)

        InterpretedFunction.run = run
        return self.launches

    def __exit__(self, *exc) -> bool:
        if self._original is not None:
            from triton.runtime.interpreter import InterpretedFunction

            InterpretedFunction.run, self._original = self._original, None
        return False


AS_COMPILED = " as torch.compile launches it (float arguments fp64)"


def inductor_signature(signature: dict) -> dict:
    """A launch's argument types as torch.compile's Inductor gives them: a float scalar is fp64
    (Triton's launcher: fp32); pointers, ints and constexprs as they were."""
    return {k: ("fp64" if v == "fp32" else v) for k, v in signature.items()}


def _run_jobs(jobs, arch, timeout, mode):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    try:
        done = subprocess.run([sys.executable, "-m", "autokernel.bench.gpu_compile", str(arch), mode],
                              input=pickle.dumps(jobs), capture_output=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise GpuCompileError(f"compiling {len(jobs)} kernels for sm_{arch} took more than {timeout} s") from e
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.decode(errors="replace").strip().splitlines()
        raise GpuCompileError(f"the sm_{arch} compile process failed: {tail[-1] if tail else done.returncode}")
    verdict = json.loads(lines[-1])
    if "error" in verdict:
        raise GpuCompileError(verdict["error"])
    return verdict


def _job(rec: Launch, signature: dict | None = None, how: str = "") -> tuple:
    """One launch as the compile process takes it; `signature` replaces its own, `how` names that typing."""
    return (rec.path, rec.name, signature or rec.signature, rec.constexprs, rec.attrs, rec.options, how)


def _jobs(launches, as_compiled):
    jobs = [_job(rec) for rec in launches]
    if as_compiled:
        typed = ((rec, inductor_signature(rec.signature)) for rec in launches)
        jobs += [_job(rec, sig, AS_COMPILED) for rec, sig in typed if sig != rec.signature]
    return jobs


def compile_for_gpu(launches, arch=90, timeout=600, as_compiled=False):
    """Lower every launch to Triton IR for CUDA sm_`arch`; raise GpuCompileError naming the kernel
    and the compiler's message on the first that does not compile. Returns how many launches
    compiled. `as_compiled`: each launch with a float argument is also lowered with Inductor's
    typing (inductor_signature), and must compile that way too.

    It runs in a fresh process without TRITON_INTERPRET: with it set, triton.language's own
    jit helpers are built as interpreted functions at import, and the code generator cannot use
    them. That process imports each kernel's module again from its file."""
    if not launches:
        return 0
    _run_jobs(_jobs(launches, as_compiled), arch, timeout, "compile")
    return len(launches)


def fp64_ops(launches, arch=90, timeout=600) -> dict:
    """Per kernel name, the fp64 arithmetic ops in its Triton IR as torch.compile launches it
    (inductor_signature): the fp64 argument's own truncation to fp32 is not counted. Raises
    GpuCompileError as compile_for_gpu does."""
    if not launches:
        return {}
    jobs = [_job(rec, inductor_signature(rec.signature), AS_COMPILED) for rec in launches]
    return _run_jobs(jobs, arch, timeout, "fp64")["fp64_ops"]


def compile_stage(recording: "record_launches", res, deadline: float, as_compiled: bool = True) -> bool:
    """The judges' `gpu-compile` stage: stop `recording`, compile what it recorded, add the verdict
    to the BenchResult `res` and, on a failure, make it a compile error. True when it passed.
    `deadline` is time.monotonic()'s. `as_compiled` (compile_for_gpu): the kernel must also compile
    as torch.compile launches it, which is how verify and apply run it in a compiled model."""
    import time

    from autokernel.bench.result import COMPILE_ERROR, StageVerdict

    recording.__exit__(None, None, None)
    try:
        n = compile_for_gpu(recording.launches, timeout=max(30.0, deadline - time.monotonic()),
                            as_compiled=as_compiled)
    except GpuCompileError as exc:
        res.stages.append(StageVerdict("gpu-compile", "fail", str(exc)[:300]))
        res.outcome, res.error = COMPILE_ERROR, f"gpu-compile: {exc}"
        return False
    res.stages.append(StageVerdict("gpu-compile", "pass", f"{n} launch(es) lowered to Triton IR for sm_90"
                                   + (", also as torch.compile launches them" if as_compiled else "")))
    return True


# an op whose result or operands are fp64, scalar ("f64") or block ("tensor<32xf64>")
_FP64_OP = re.compile(r"=\s*(?:arith|math|tt)\.(\w+)\b.*(?:\b|x)f64\b")


def _reason(e: BaseException) -> str:
    """One line for a compile error: its last message line; where that line is only the caret
    under the source (an assertion inside a Triton builtin), the innermost position and the cause."""
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    if lines and any(ch.isalpha() for ch in lines[-1]):
        return lines[-1]
    where, root = lines[0] if lines else "", e
    while root.__cause__ is not None:
        root = root.__cause__
        first = str(root).strip().splitlines()
        if first and first[0].startswith("at "):
            where = first[0]
    return f"{where} {type(root).__name__}{': ' + str(root) if str(root) and root is not e else ''}".strip()


def _compile_jobs(jobs, arch, mode="compile"):
    import importlib.util

    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    target = GPUTarget("cuda", arch, 32)
    backend = CUDABackend(target)
    modules = {}
    counts: dict = {}
    for path, name, signature, constexprs, attrs, options, how in jobs:
        if path not in modules:
            spec = importlib.util.spec_from_file_location(f"autokernel_gpu_compile_{len(modules)}", path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod
            spec.loader.exec_module(mod)
            modules[path] = mod
        fn = getattr(modules[path], name, None)
        if not isinstance(fn, JITFunction):
            return {"error": f"{name} is not a module-level Triton kernel of {path}"}
        opts = backend.parse_options(dict(options))
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        try:
            attrs = {k: backend.parse_attr(v) for k, v in attrs.items()}
            module = ASTSource(fn, signature, constexprs, attrs).make_ir(
                target, opts, backend.get_codegen_implementation(opts), backend.get_module_map(), context)
        except Exception as e:  # the compiler's own errors carry the source position
            return {"error": f"{name} does not compile for sm_{arch}{how}: {_reason(e)}"}
        if mode == "fp64":
            ops = [m.group(1) for m in map(_FP64_OP.search, str(module).splitlines()) if m]
            counts[name] = counts.get(name, 0) + sum(op != "truncf" for op in ops)
    return {"compiled": len(jobs), "fp64_ops": counts}


if __name__ == "__main__":
    print(json.dumps(_compile_jobs(pickle.loads(sys.stdin.buffer.read()), int(sys.argv[1]),
                                   sys.argv[2] if len(sys.argv) > 2 else "compile")))
