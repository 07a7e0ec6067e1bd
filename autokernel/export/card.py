"""The exported repository's README: what the kernel computes, how it was checked, how fast it was."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Optional

from autokernel.textfmt import number


@dataclass
class Provenance:
    """Where an exported kernel came from and what was measured of it (None: not measured)."""

    kernel_name: str
    kernel_type: str
    backend: str
    commit: Optional[str] = None
    experiment: Optional[int] = None
    run: Optional[int] = None
    date: Optional[str] = None
    device: Optional[str] = None
    dtype: Optional[str] = None
    shapes: list[dict] = field(default_factory=list)
    latency_us: Optional[float] = None
    eager_us: Optional[float] = None
    compile_us: Optional[float] = None
    speedup_vs_eager: Optional[float] = None
    speedup_vs_compile: Optional[float] = None
    correctness: Optional[str] = None
    stages: dict[str, Any] = field(default_factory=dict)


def _fmt(v: Optional[float], unit: str = "") -> str:
    return number(v, ".2f", unit, missing="not measured")


def render_card(plan, prov: Provenance, reference_source: str, description: str) -> str:
    alias = plan.kernel_type
    shapes = "\n".join(f"- `{s}`" for s in prov.shapes) or "- (none recorded)"
    stages = ", ".join(f"{k}: {v}" for k, v in prov.stages.items() if v) or "not recorded"
    measured_on = prov.device or "no GPU measurement recorded"
    variants = "\n".join(f"- `build/{v}`" for v in plan.variants)
    return f"""---
library_name: kernels
license: apache-2.0
tags:
- kernels
- autokernel
- {plan.kernel_type.replace('_', '-')}
- {plan.backend}
---

# {plan.name}

{description}

This {plan.backend.upper() if plan.backend == 'cuda' else 'Triton'} kernel was found by
[AutoKernel](https://github.com/autokernel) from the starting `{prov.kernel_type}` kernel and exported
from experiment {prov.experiment if prov.experiment is not None else '(none: branch head)'} of kernel
`{prov.kernel_name}` (commit `{prov.commit or 'unknown'}`, {prov.date or 'date unknown'}).

## Usage

```python
from kernels import get_kernel

k = get_kernel("{plan.repo_id}", version={plan.version}, trust_remote_code=True)
out = k.{alias}(...)  # same arguments and result as the reference below
```

From a local copy: `kernels.get_local_kernel(Path("path/to/this/repo"))`.

## What it computes

The PyTorch reference it was checked against:

```python
{reference_source.rstrip()}
```

## Verification

- dtype: `{prov.dtype or 'unknown'}`; shapes it was checked and timed on:
{shapes}
- AutoKernel's five correctness stages (smoke, shape sweep, numerical stability, determinism,
  edge cases) on fresh random inputs: {prov.correctness or 'not recorded'} ({stages})

## Performance

Measured by AutoKernel's bench on {measured_on} (CUDA events, L2 flushed, median), eager PyTorch and
torch.compile timed in the same process:

| | latency |
|---|---|
| this kernel | {_fmt(prov.latency_us, ' us')} |
| PyTorch eager | {_fmt(prov.eager_us, ' us')} |
| torch.compile | {_fmt(prov.compile_us, ' us')} |

Speed-up vs eager: {_fmt(prov.speedup_vs_eager, 'x')}; vs torch.compile: {_fmt(prov.speedup_vs_compile, 'x')}.

## Build variants

{variants}
"""


def reference_source(spec) -> str:
    try:
        return inspect.getsource(spec.reference)
    except (OSError, TypeError):
        return f"# reference: {spec.description}"
