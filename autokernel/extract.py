"""Turn a profile's bottlenecks into editable kernels: a store row and a workspace branch each.

Kernel names: f"{model}.{kernel_type}" for Triton, f"{model}.{kernel_type}.cuda" for CUDA C++, so
both backends of one bottleneck can be optimized side by side.

The model's real shapes are stored in Kernel.shapes_json as
    {"shapes": [shape dicts in the spec's keys], "weights": [calls per forward of each shape]}
(the profile entry's "shapes" and "weights", same order). Bench and the loop read them with
kernel_shapes(); it also accepts a bare list of shape dicts (weight 1 each), which is what
kernels made outside extract (KernelBench problems, hand-added ones) may hold.

Extracting again is idempotent: an existing kernel keeps its branch and history; only its share,
shapes and profile id follow the newer profile.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from autokernel.errors import NotFoundError
from autokernel.kernels import BACKENDS, kernel_types, starter_path
from autokernel.store import Store
from autokernel.store.tables import Kernel, Profile


def kernel_name(model: str, kernel_type: str, backend: str = "triton") -> str:
    return f"{model}.{kernel_type}" + ("" if backend == "triton" else f".{backend}")


def shapes_payload(entry: dict[str, Any]) -> dict[str, list]:
    shapes = list(entry.get("shapes") or [])
    weights = list(entry.get("weights") or [1] * len(shapes))
    return {"shapes": shapes, "weights": weights[: len(shapes)]}


def kernel_shapes(kernel: Kernel | str) -> tuple[list[dict[str, int]], list[float]]:
    """(shapes, weights) from a Kernel (or its shapes_json text), in either stored form."""
    raw = kernel if isinstance(kernel, str) else kernel.shapes_json
    data = json.loads(raw or "[]")
    if isinstance(data, dict):
        shapes = list(data.get("shapes") or [])
        weights = list(data.get("weights") or [])
    else:
        shapes, weights = list(data), []
    if len(weights) != len(shapes):
        weights = [1] * len(shapes)
    return shapes, weights


def resolve_profile(store: Store, profile_id: int | None = None, model: str | None = None) -> Profile:
    if profile_id is not None:
        return store.get_profile(profile_id)
    profile = store.latest_profile(model)
    if profile is None:
        raise NotFoundError("no profile in the store" + (f" for {model}" if model else ""),
                            hint="run `autokernel profile --model M` first")
    return profile


def bottlenecks(profile: Profile, top: int) -> list[dict[str, Any]]:
    """The top-N classified entries (never "other"), largest share first."""
    entries = [e for e in json.loads(profile.entries_json or "[]") if e.get("kernel_type") in kernel_types()]
    entries.sort(key=lambda e: -float(e.get("share", 0.0)))
    return entries[: max(top, 0)]


def extract(store: Store, workspace: Any, *, profile_id: int | None = None, top: int = 5,
            backend: str = "triton", model: str | None = None,
            on_skip: Callable[[str, str], None] | None = None) -> list[Kernel]:
    """Create (or refresh) one kernel per bottleneck; returns them in profile order.

    A type whose starting kernel is missing for `backend` is skipped and reported via on_skip(name,
    reason) rather than failing the others.
    """
    if backend not in BACKENDS:
        raise NotFoundError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    profile = resolve_profile(store, profile_id, model)
    kernels: list[Kernel] = []
    for entry in bottlenecks(profile, top):
        ktype = entry["kernel_type"]
        name = kernel_name(profile.model, ktype, backend)
        starter = starter_path(ktype, backend)
        if not starter.is_file():
            if on_skip:
                on_skip(name, f"no {backend} starting kernel for {ktype} ({starter})")
            continue
        fields = dict(profile_id=profile.id, share=float(entry.get("share", 0.0)),
                      shapes_json=json.dumps(shapes_payload(entry)), dtype=entry.get("dtype", "bfloat16"))
        if workspace.has_kernel(name):
            base = None
        else:
            base = workspace.add_kernel(
                name, starter.read_text(),
                f"extract {name}: {ktype} starting kernel ({backend}) for {profile.model}, "
                f"{100 * fields['share']:.1f}% of profile {profile.id}")
        row = store.find_kernel(name)
        if row is None:
            row = store.add_kernel(name, ktype, backend=backend, model=profile.model, profile_id=profile.id,
                                   share=fields["share"], shapes=None, dtype=fields["dtype"],
                                   branch=workspace.branch_name(name),
                                   base_commit=base or workspace.head(name))
            row = store.update_kernel(row.id, shapes_json=fields["shapes_json"])
        else:
            if base is not None:  # the workspace was recreated: the row follows the new branch
                fields.update(branch=workspace.branch_name(name), base_commit=base)
            row = store.update_kernel(row.id, **fields)
        kernels.append(row)
    return kernels
