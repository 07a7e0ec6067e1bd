"""Every kernel as a torch custom op, so torch.compile traces through it and CUDA graphs capture it.

A kernel file's entry (`kernel_fn`) becomes the operator `autokernel::<type>_<sha>`, where sha is
the first 10 hex digits of the file's sha256: the same source gets the same name in every process,
so a graph, a log line or a profile names exactly the kernel that ran. The schema is the type's
reference signature (its spec), nothing is mutated, and the output is a fresh contiguous tensor.

Two ways in, chosen per kernel:
- Triton kernels on a GPU: `torch.library.triton_op`. While the op is traced (Dynamo/AOTAutograd
  functionalisation, fake tensors), every launch `kernel[grid](...)` that kernel_fn makes goes
  through `torch.library.wrap_triton`, so the graph Inductor receives holds the Triton kernel
  itself, which it launches from its own wrapper code and schedules with the rest of the graph.
  A kernel file launches its kernels the ordinary way; the routing is done here (launches_traced),
  so candidate files need not know about it.
- CUDA C++ kernels, Triton under the interpreter (no GPU), and any Triton kernel file whose launches
  cannot be traced (a check at registration): `torch.library.custom_op`, opaque to the compiler, with
  a fake implementation that runs the spec's reference on the fake tensors (shape and dtype only).

In eager mode a model calls `KernelOp.fn` (kernel_fn itself): the dispatcher costs several
microseconds a call, which is what short prompts and decode cannot afford; the op is what a
compiled graph calls.
"""

from __future__ import annotations

import inspect
import os
import threading
import typing
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from autokernel.errors import KernelFileError
from autokernel.kernelfile import KernelFile, entry_point, import_kernel, parse_source
from autokernel.kernels import get_spec

NAMESPACE = "autokernel"
_registry: dict[str, "KernelOp"] = {}
_lock = threading.RLock()


@dataclass
class KernelOp:
    name: str  # "autokernel::rmsnorm_1a2b3c4d5e"
    kernel_type: str
    backend: str  # triton | cuda
    kind: str  # triton_op | custom_op
    fn: Callable  # the kernel file's entry, for eager calls
    op: Callable  # torch.ops.autokernel.<name>.default
    source_hash: str
    note: str = ""  # why a Triton kernel is an opaque custom_op

    def __call__(self, *args):
        return self.op(*args)


def op_name(kernel_type: str, source_hash: str) -> str:
    return f"{kernel_type}_{source_hash[:10]}"


def triton_interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _resolved_annotation(tp: Any) -> Any:
    """Optional[X] for `X | None`: the schema inference of older torch releases reads only typing forms."""
    args = typing.get_args(tp)
    if type(tp).__name__ == "UnionType" and len(args) == 2 and type(None) in args:
        return typing.Optional[next(a for a in args if a is not type(None))]
    return tp


def op_signature(kernel_type: str) -> inspect.Signature:
    """The op's Python signature: the reference's parameters, annotated, returning a Tensor."""
    ref = get_spec(kernel_type).reference
    hints = typing.get_type_hints(ref)
    params = [p.replace(annotation=_resolved_annotation(hints[p.name]))
              for p in inspect.signature(ref).parameters.values()]
    return inspect.Signature(params, return_annotation=torch.Tensor)


@contextmanager
def launches_traced() -> Iterator[None]:
    """Route `kernel[grid](...)` through torch.library.wrap_triton while a triton_op is traced.

    Patched on Triton's KernelInterface (the base of JITFunction and Autotuner) for the duration of
    one traced call only; eager calls of the op never come here (triton_op disables wrapping then)."""
    from triton.runtime.jit import KernelInterface

    original = KernelInterface.__getitem__

    def getitem(self, grid):
        return torch.library.wrap_triton(self)[grid]

    with _lock:
        KernelInterface.__getitem__ = getitem
        try:
            yield
        finally:
            KernelInterface.__getitem__ = original


def _fresh(out: torch.Tensor) -> torch.Tensor:
    # A custom op's output may not alias its inputs, and fake and real outputs must agree on strides.
    return out if out.is_contiguous() else out.contiguous()


def _with_signature(fn: Callable, sig: inspect.Signature, name: str) -> Callable:
    fn.__signature__ = sig
    fn.__name__ = fn.__qualname__ = name
    return fn


def _traced_body(entry: Callable) -> Callable:
    from torch._library.triton import is_wrap_triton_enabled

    def body(*args):
        if is_wrap_triton_enabled():  # traced: launches become graph nodes
            with launches_traced():
                return _fresh(entry(*args))
        return _fresh(entry(*args))
    return body


def _custom_op(qualname: str, kernel_type: str, entry: Callable, sig: inspect.Signature) -> None:
    spec = get_spec(kernel_type)

    def body(*args):
        return _fresh(entry(*args))

    def fake(*args):
        return spec.reference(*args).contiguous()

    op = torch.library.custom_op(qualname, _with_signature(body, sig, qualname.split("::")[1]), mutates_args=())
    op.register_fake(_with_signature(fake, sig, "fake"))


def _inductor_compiles(entry: Callable, kernel_type: str, cache_dir: Path | None, source_hash: str) -> str | None:
    """Why Inductor cannot compile the kernel's launches (None: it can), at a spec's small shape.

    Inductor compiles a traced Triton kernel itself, with its own launcher and specialisation, and a
    kernel that Triton's JIT accepts can fail there. Checked once per kernel source and versions; the
    verdict is kept in `cache_dir` (op_verdicts.json) when one is given."""
    import json

    import triton

    key = f"{source_hash}:{torch.__version__}:{triton.__version__}"
    path = Path(cache_dir) / "op_verdicts.json" if cache_dir is not None else None
    verdicts = {}
    if path is not None and path.exists():
        try:
            verdicts = json.loads(path.read_text())
        except ValueError:
            verdicts = {}
    if key in verdicts:
        return verdicts[key] or None
    spec = get_spec(kernel_type)
    dtype = torch.bfloat16 if "bfloat16" in spec.dtypes else torch.float32
    args = spec.make_inputs(spec.small_shapes[0], dtype, "cuda", torch.Generator(device="cuda").manual_seed(0))
    why = None
    try:
        # Dynamo captures the file's kernel[grid](...) launches itself, as Inductor gets them from a triton_op
        torch.compile(lambda *a: _fresh(entry(*a)), dynamic=False, fullgraph=True)(*args)
        torch.cuda.synchronize()
    except Exception as exc:  # the kernel, as Inductor compiles it, fails: keep it opaque
        why = f"Inductor cannot compile it: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}"
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(dict(verdicts, **{key: why or ""}), indent=1))
        except OSError:
            pass  # a read-only cache only costs the check again next time
    return why


def _traceable(body: Callable, kernel_type: str) -> str | None:
    """Why the op's body cannot be traced on fake tensors (None: it can), at a spec's small shape."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    spec = get_spec(kernel_type)
    dtype = torch.bfloat16 if "bfloat16" in spec.dtypes else torch.float32
    args = spec.make_inputs(spec.small_shapes[0], dtype, "cuda", torch.Generator(device="cuda").manual_seed(0))
    try:
        with FakeTensorMode(allow_non_fake_inputs=False) as mode:
            fake_args = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
            out = body(*fake_args)
        if not isinstance(out, torch.Tensor):
            return f"returned {type(out).__name__}, not a tensor"
    except Exception as exc:  # any failure means: not traceable through wrap_triton
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return None


def register(kernel: KernelFile | str, *, module: Any = None, prefer: str | None = None,
             cache_dir: Path | None = None) -> KernelOp:
    """The custom op of one kernel file (a KernelFile, or its source text), registered once per
    process; `module`: the file already imported; `cache_dir`: where a file without a path of its
    own is written to be imported. `prefer` ("custom_op") forces the opaque form."""
    kf = parse_source(kernel) if isinstance(kernel, str) else kernel
    name = op_name(kf.kernel_type, kf.source_hash)
    qualname = f"{NAMESPACE}::{name}"
    if qualname in _registry:
        return _registry[qualname]
    mod = module if module is not None else import_kernel(kf, cache_dir)
    entry = entry_point(mod)
    sig = op_signature(kf.kernel_type)
    kind, note = "custom_op", ""
    if kf.backend != "triton":
        note = "CUDA C++ kernel"
    elif triton_interpreted() or not torch.cuda.is_available():
        note = "Triton interpreter (no GPU): launches run eagerly"
    elif prefer != "custom_op":
        kind = "triton_op"
    if kind == "triton_op":
        # Registering is final for the process, so the launch routing is tried first on fake
        # tensors; a file whose launches cannot be traced gets the opaque form instead.
        body = _traced_body(entry)
        why = _traceable(body, kf.kernel_type) or _inductor_compiles(entry, kf.kernel_type, cache_dir, kf.source_hash)
        if why is None:
            torch.library.triton_op(qualname, _with_signature(body, sig, name), mutates_args=())
        else:
            kind, note = "custom_op", f"launches not traceable ({why})"
    if kind == "custom_op":
        _custom_op(qualname, kf.kernel_type, entry, sig)
    kop = KernelOp(name=qualname, kernel_type=kf.kernel_type, backend=kf.backend, kind=kind, fn=entry,
                   op=getattr(getattr(torch.ops, NAMESPACE), name).default, source_hash=kf.source_hash, note=note)
    _registry[qualname] = kop
    return kop


def register_source(source: str, path: Path | None = None, cache_dir: Path | None = None) -> KernelOp:
    """register() for source text (with its file's path when it has one); a kernel that torch.library
    refuses is a KernelFileError."""
    try:
        return register(parse_source(source, path), cache_dir=cache_dir)
    except KernelFileError:
        raise
    except Exception as exc:  # torch.library rejects a schema or a name: the file's fault, say so
        raise KernelFileError(f"cannot register the kernel as a custom op: {type(exc).__name__}: {exc}") from exc


def registered() -> list[KernelOp]:
    return list(_registry.values())
