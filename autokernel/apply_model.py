"""`autokernel.apply(model)`: the best kept kernels in a live model, the way Liger or HF `kernels` patch one.

    import autokernel
    handle = autokernel.apply(model)            # permanent until handle.remove()
    with autokernel.apply(model): ...           # or for one block
    model = torch.compile(model)                # before or after apply: the kernels are custom ops

Which kernels: by default the best kept version of every kernel the latest loop run optimized (or
the run given), from the AutoKernel home; `kernels=` narrows that to some types or kernel names,
`kernels="starters"` takes every type's starting kernel (no store needed), and a dict maps types to
kernel files. At every call the kernel's route decides by shape whether the kernel or PyTorch runs
(autokernel.dispatch): decisions recorded by verify and the bench for that exact kernel source,
else the mode's default. The kernels are forward-only: calls that need autograd keep PyTorch's path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from torch import nn

from autokernel.amdahl import kernel_speedup
from autokernel.config import Paths, bind_cache, resolve_home
from autokernel.dispatch import Decision, Decisions, from_bench
from autokernel.errors import ConfigError, NotFoundError
from autokernel.kernels import get_spec, kernel_types, starter_path
from autokernel.ops import KernelOp, register_source
from autokernel.plug import Plug

STARTERS = "starters"


@dataclass
class KeptKernel:
    """One kernel chosen for a model, with where it came from and what it measured."""

    name: str  # the store's kernel name, or "<type> starter" / the file's path
    kernel_type: str
    source: str
    origin: str  # "experiment N (sha)" | "branch head" | "starter" | "file"
    path: Optional[Path] = None  # the file, when it is one (starters, files given by the user)
    speedup: Optional[float] = None  # over eager, from its best experiment
    gain: float = 1.0  # the speed-up the Amdahl prediction uses (autokernel.amdahl.kernel_speedup)
    share: float = 0.0  # of the model's time, from the profile
    per_shape: list[dict] = field(default_factory=list)  # the best experiment's per-shape timings
    backend: str = "triton"


def starter_kernel(kernel_type: str, backend: str = "triton") -> KeptKernel:
    path = starter_path(kernel_type, backend)
    return KeptKernel(name=f"{kernel_type} starter", kernel_type=kernel_type, source=path.read_text(),
                      origin="starter", path=path, backend=backend)


def best_kernels(store: Any, workspace: Any, model: str, names: Iterable[str] | None = None, *,
                 only_kept: bool = False, skipped: list[str] | None = None) -> list[KeptKernel]:
    """The best kept kernel of every type the store has for `model` (the fastest over eager where
    several kernels share a type); `names` narrows to kernel names or types. only_kept: a kernel the
    loop never improved (its best is its start, and no timing says that start beats eager) is left
    out unless named; its name goes to `skipped`."""
    rows = store.list_kernels(model=model)
    if names:
        wanted = set(names)
        missing = wanted - {k.name for k in rows} - {k.kernel_type for k in rows}
        if missing:
            raise NotFoundError(f"kernel(s) {', '.join(sorted(missing))} not found for {model}")
        rows = [k for k in rows if k.name in wanted or k.kernel_type in wanted]
    best: dict[str, KeptKernel] = {}
    for k in rows:
        if k.kernel_type not in kernel_types():
            continue
        exp = store.best_experiment(k.id)
        if only_kept and not names and not (exp is not None and (exp.status == "kept" or exp.speedup_vs_eager)):
            if skipped is not None:
                skipped.append(k.name)
            continue
        if exp is not None and exp.commit and workspace is not None:
            source, origin = workspace.read(k.name, exp.commit), f"experiment {exp.number} ({exp.commit[:10]})"
        elif workspace is not None and workspace.has_kernel(k.name):
            source, origin = workspace.read(k.name), "branch head"
        else:
            source, origin = starter_path(k.kernel_type, k.backend).read_text(), "starter"
        speedup = float(exp.speedup_vs_eager) if exp is not None and exp.speedup_vs_eager else None
        starts = [e for e in store.list_experiments(kernel_id=k.id, status="baseline") if e.latency_us]
        gain = kernel_speedup(speedup, starts[-1].latency_us if starts else None,
                              exp.latency_us if exp is not None else None)
        details = json.loads(exp.details_json) if exp is not None and getattr(exp, "details_json", None) else []
        cand = KeptKernel(name=k.name, kernel_type=k.kernel_type, source=source, origin=origin, speedup=speedup,
                          gain=gain, share=float(k.share or 0.0), per_shape=details, backend=k.backend)
        current = best.get(k.kernel_type)
        if current is None or (speedup or 0.0) > (current.speedup or 0.0):
            best[k.kernel_type] = cand
    return list(best.values())


def device_label() -> str:
    """The name decisions are recorded under: the GPU's, or "cpu"."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def decisions_for(kernel: KeptKernel, op: KernelOp, store: Any = None, device: str | None = None,
                  use_unmeasured: bool | None = None) -> Decisions:
    """The per-shape decisions of one kernel source on this device: its bench timings, then what
    verify measured in the model (which outranks them), then the defaults (autokernel.dispatch), which
    use_unmeasured=True / False replaces in both modes."""
    spec = get_spec(kernel.kernel_type)
    d = Decisions(kernel.kernel_type)
    if use_unmeasured is not None:
        d.defaults = {"eager": use_unmeasured, "compile": use_unmeasured}
    if kernel.speedup is not None and kernel.speedup <= 1.0 and use_unmeasured is None:
        d.defaults["eager"] = False  # measured, and not faster than eager where it was timed
    for dec in from_bench(kernel.kernel_type, kernel.per_shape, spec.shape_label):
        d.add(dec)
    if store is not None:
        device = device or device_label()
        for row in store.list_dispatch(kernel_type=kernel.kernel_type, source_hash=op.source_hash):
            if row.device not in (None, device):
                continue
            d.add(Decision(row.kernel_type, row.mode, row.shape, row.dtype, bool(row.use), row.kernel_ms,
                           row.fallback_ms, row.evidence, row.workload))
    return d


def load_ops(kernels: list[KeptKernel], cache_dir: Path | None = None) -> dict[str, KernelOp]:
    """type -> the kernel's custom op (registered once per process and source)."""
    return {k.kernel_type: register_source(k.source, k.path, cache_dir) for k in kernels}


class Applied(Plug):
    """What apply() put into the model: the kernels, their ops and decisions, and the live routes.
    remove() (or the end of a `with` block) restores the model. While the kernels are in, the
    AutoKernel cache is `paths`' (config.bind_cache): a CUDA kernel builds its extension at its
    first call, and that build goes under the home apply() was given."""

    def __init__(self, model: nn.Module, kernels: list[KeptKernel], ops: dict[str, KernelOp],
                 decisions: dict[str, Decisions], notes: list[str], paths: Paths | None = None):
        super().__init__(model, ops, decisions)
        self.kernels = kernels
        self.ops = ops
        self.decisions = decisions
        self.notes = notes
        self._release_cache = bind_cache(paths) if paths is not None else (lambda: None)

    def remove(self) -> None:
        try:
            super().remove()
        finally:
            self._release_cache()

    def summary(self) -> list[dict]:
        rep = self.report
        return [{"kernel": k.name, "type": k.kernel_type, "origin": k.origin, "op": self.ops[k.kernel_type].name,
                 "op_kind": self.ops[k.kernel_type].kind, "sites": rep.sites.get(k.kernel_type, 0)}
                for k in self.kernels]


def _kernels_from_files(spec: dict[str, Any]) -> list[KeptKernel]:
    out = []
    for t, value in spec.items():
        if t not in kernel_types():
            raise ConfigError(f"unknown kernel type {t!r}; known: {', '.join(kernel_types())}")
        text = str(value)
        path = Path(text) if "\n" not in text and Path(text).is_file() else None
        source = path.read_text() if path is not None else text
        out.append(KeptKernel(name=str(path) if path else f"{t} (source)", kernel_type=t, source=source,
                              origin="file", path=path))
    return out


def _store_model(store: Any, run: int | None) -> str:
    if run is not None:
        r = store.get_run(run)
        if not r.model:
            raise NotFoundError(f"run {run} has no model")
        return r.model
    latest = store.latest_run("loop")
    if latest is not None and latest.model:
        return latest.model
    models = sorted({k.model for k in store.list_kernels() if k.model})
    if len(models) == 1:
        return models[0]
    if not models:
        raise NotFoundError("the AutoKernel store has no kernels yet: run `autokernel loop --model ...` "
                            "first, or use apply(model, kernels='starters')")
    raise NotFoundError(f"the store has kernels for several models ({', '.join(models)}): pass run=RUN")


def choose_kernels(paths: Paths, run: int | None, kernels: Any) -> tuple[list[KeptKernel], Any]:
    """(kernels, the open store or None) for apply()'s arguments."""
    if isinstance(kernels, str) and kernels == STARTERS:
        return [starter_kernel(t) for t in kernel_types()], None
    if isinstance(kernels, dict):
        return _kernels_from_files(kernels), None
    names = [kernels] if isinstance(kernels, str) else list(kernels) if kernels is not None else None
    if not paths.db.exists() and names and all(t in kernel_types() for t in names):
        return [starter_kernel(t) for t in names], None  # types on a machine with no runs yet
    if not paths.db.exists():
        raise NotFoundError(f"no AutoKernel store at {paths.home}: run `autokernel loop` there first, "
                            f"or use apply(model, kernels='starters')")
    from autokernel.store import Store
    from autokernel.workspace import Workspace

    store = Store(paths.db)
    try:
        model = _store_model(store, run)
        chosen = best_kernels(store, Workspace.open(paths), model, names)
        if names:
            have = {k.kernel_type for k in chosen}
            chosen += [starter_kernel(t) for t in names if t in kernel_types() and t not in have]
    except BaseException:
        store.close()
        raise
    return chosen, store


def apply(model: nn.Module, run: int | None = None, kernels: Any = None, home: str | Path | None = None, *,
          use_unmeasured: bool | None = None) -> Applied:
    """Put AutoKernel's kernels into `model` (see the module doc); returns the handle.

    home: the AutoKernel home (else $AUTOKERNEL_HOME, else ./.autokernel): where the kernels come
    from, and where every cache write goes while they are applied (kernel-source copies, a CUDA
    kernel's extension built at its first call).
    use_unmeasured: at shapes where nothing was measured, True uses the kernels in every mode and
    False never does; by default eager mode uses them and torch.compile leaves them out."""
    if not isinstance(model, nn.Module):
        raise ConfigError(f"apply() takes a torch.nn.Module, not a {type(model).__name__}")
    paths = resolve_home(home)
    chosen, store = choose_kernels(paths, run, kernels)
    try:
        cache = paths.cache / "kernel_sources"
        ops = load_ops(chosen, cache)
        decisions = {k.kernel_type: decisions_for(k, ops[k.kernel_type], store, use_unmeasured=use_unmeasured)
                     for k in chosen}
    finally:
        if store is not None:
            store.close()
    notes = [f"{op.name}: {op.kind}" + (f" ({op.note})" if op.note else "") for op in ops.values()]
    return Applied(model, chosen, ops, decisions, notes, paths)
