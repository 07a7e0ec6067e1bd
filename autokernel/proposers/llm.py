"""The LLM proposer: the playbook, the rules, the kernel and its record go to a chat model over
HTTP; the reply's file comes back as the candidate.

Every call is a row in llm_calls (provider, model, status, attempts, tokens, latency; never a
key). A reply is usable only when it holds a ```python block that parses as a kernel file of the
same type and backend and is under the size limit; otherwise the call is recorded as no_code,
syntax_error or too_large and the proposer raises ProposerError (a failed attempt, not an
exhausted kernel). The generated code is never imported here: it runs only in the bench's child
process, whose environment holds no API keys.
"""

from __future__ import annotations

import inspect
import json
import re
from importlib import resources
from typing import Any, Optional, Sequence

from autokernel.errors import KernelFileError, ProposerError
from autokernel.kernelfile import MAX_SOURCE_BYTES, parse_source
from autokernel.proposers.base import KernelContext, Proposal
from autokernel.proposers.providers import CallFailed, make_provider

_BLOCK = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_DESCRIPTION = re.compile(r"^\s*DESCRIPTION:\s*(.+)$", re.MULTILINE)


def prompt_text(name: str) -> str:
    return resources.files("autokernel.prompts").joinpath(name).read_text()


def kernel_notes(kernel_type: str) -> str:
    """The `## <type>` section of kernels.md."""
    text = prompt_text("kernels.md")
    m = re.search(rf"^## {re.escape(kernel_type)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    return m.group(1).strip() if m else ""


def extract_code(reply: str) -> Optional[str]:
    """The reply's kernel file: the longest fenced block that defines kernel_fn (else the longest)."""
    blocks = [b.strip("\n") + "\n" for b in _BLOCK.findall(reply or "")]
    if not blocks:
        return None
    with_entry = [b for b in blocks if "def kernel_fn" in b]
    return max(with_entry or blocks, key=len)


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def history_table(history: Sequence[Any], limit: int) -> str:
    rows = [e for e in history if e.status not in ("running",)][-limit:]
    if not rows:
        return "(no experiments yet)"
    lines = ["| # | status | latency us | % of roofline | vs eager | description | error |", "|---|---|---|---|---|---|---|"]
    for e in rows:
        err = (e.error or "").replace("\n", " ")[:160]
        lines.append(f"| {e.number} | {e.status} | {_fmt(e.latency_us, '.2f')} | {_fmt(e.pct_peak)} | "
                     f"{_fmt(e.speedup_vs_eager, '.2f')} | {e.description[:100]} | {err} |")
    return "\n".join(lines)


def build_prompt(source: str, spec: Any, history: Sequence[Any], last_result: Any,
                 kernel: Optional[KernelContext], recent: int = 8) -> tuple[str, str]:
    system = prompt_text("rules.md") + "\n\n" + prompt_text("playbook.md")
    kernel_type = kernel.kernel_type if kernel else getattr(spec, "name", "")
    parts = [f"# Kernel: {kernel.name if kernel else kernel_type} ({kernel_type}, {kernel.backend if kernel else ''})"]
    notes = kernel_notes(kernel_type)
    if notes:
        parts.append("## Notes for this kernel type\n" + notes)
    if spec is not None:
        try:
            ref = inspect.getsource(spec.reference)
        except (OSError, TypeError):
            ref = repr(spec.reference)
        parts.append(f"## The reference (what kernel_fn must compute)\n{spec.description}\n```python\n{ref}```")
    if kernel:
        shapes = ", ".join(json.dumps(s) for s in kernel.shapes[:8]) or "the spec's default shapes"
        parts.append(f"## What it is timed on\ndtype {kernel.dtype}; the model's shapes (weights = calls per "
                     f"forward {kernel.weights[:8]}): {shapes}")
    best = [e for e in history if e.status in ("kept", "baseline") and e.latency_us]
    if best:
        b = min(best, key=lambda e: e.latency_us)
        parts.append(f"## Roofline position\nBest so far: {b.latency_us:.2f} us, {_fmt(b.pct_peak)}% of the "
                     f"measured ceiling, {_fmt(b.speedup_vs_eager, '.2f')}x eager PyTorch, "
                     f"{_fmt(b.speedup_vs_compile, '.2f')}x torch.compile. The current file is that best version.")
    if last_result is not None and getattr(last_result, "error", None):
        parts.append(f"## The last attempt failed\n{last_result.outcome}: {str(last_result.error)[-1500:]}")
    parts.append("## Recent experiments on this kernel\n" + history_table(history, recent))
    parts.append(f"## The current kernel.py\n```python\n{source}```")
    parts.append("Write a faster version following the rules. Answer with the DESCRIPTION line and the whole file.")
    return system, "\n\n".join(parts)


class LLMProposer:
    name = "llm"
    writes_source = True

    def __init__(self, *, store=None, run_id: int | None = None, provider: str | None = None,
                 model: str | None = None, client=None, recent: int = 8):
        self.client = client or make_provider(provider, model)
        self.store = store
        self.run_id = run_id
        self.recent = recent

    def _record(self, **fields) -> Optional[int]:
        if self.store is None:
            return None
        row = self.store.add_llm_call(run_id=self.run_id, provider=self.client.name, model=self.client.model, **fields)
        return row.id

    def propose(self, source: str, spec: Any = None, history: Sequence[Any] = (), last_result: Any = None, *,
                kernel: Optional[KernelContext] = None) -> Proposal:
        current = parse_source(source)
        system, user = build_prompt(source, spec, history, last_result, kernel, self.recent)
        try:
            reply = self.client.complete(system, user)
        except CallFailed as exc:
            self._record(status=exc.status, http_status=exc.http_status, attempts=exc.attempts,
                         latency_s=exc.latency_s, error=exc.one_line()[:2000])
            raise
        call = dict(http_status=reply.http_status, attempts=reply.attempts, prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens, latency_s=reply.latency_s)
        code = extract_code(reply.text)
        if code is None:
            self._record(status="no_code", error=f"no ```python block in a {len(reply.text)}-character reply", **call)
            raise ProposerError("the LLM reply holds no ```python block")
        if len(code.encode()) > MAX_SOURCE_BYTES:
            self._record(status="too_large", error=f"{len(code.encode())} bytes", **call)
            raise ProposerError(f"the LLM's file is {len(code.encode())} bytes, over {MAX_SOURCE_BYTES}")
        try:
            kf = parse_source(code)
            if (kf.kernel_type, kf.backend) != (current.kernel_type, current.backend):
                raise KernelFileError(f"the file declares {kf.kernel_type}/{kf.backend}, "
                                      f"not {current.kernel_type}/{current.backend}")
        except KernelFileError as exc:
            self._record(status="syntax_error", error=exc.one_line()[:2000], **call)
            raise ProposerError(f"the LLM's file is not a usable kernel file: {exc.one_line()}") from exc
        m = _DESCRIPTION.search(reply.text.split("```", 1)[0])
        description = " ".join(m.group(1).split())[:200] if m else f"llm {self.client.model}"
        call_id = self._record(status="ok", **call)
        return Proposal(source=code, description=description, config=kf.config, llm_call_id=call_id)
