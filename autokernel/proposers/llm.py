"""The LLM proposer: the rules, the judge, the playbook, the kernel and its record go to a chat
model over HTTP (prompt.py); the answer's file or edits come back as candidates (answers.py).

Every call is a row in llm_calls (provider, model, kernel, status, attempts, finish reason, tokens,
latency, cost, the prompt's hash, prompt and reply text compressed; never a key: all text is
redacted). An answer that gives no candidate is recorded with its status (no_code, ambiguous,
edit_failed, truncated, unchanged, syntax_error, too_large) and the next prompt says what was wrong
with it; the proposer raises ProposerError (a failed attempt, not an exhausted kernel). An
endpoint that refuses the configuration raises an LLMError marked fatal (the run stops); a spent
budget raises LLMBudgetSpent (the run stops cleanly); Ctrl-C during a call is recorded as "interrupted".

With `candidates` n > 1 the proposer asks for n answers (one request where the protocol has `n`,
else n requests) and returns every usable one: the loop judges them as one batch. A pool of judges
asks for as many as it has free judges (KernelContext.batch), never fewer than n. The generated
code is never imported here: it runs only in the bench's child process, whose environment holds
no API keys.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Optional, Sequence

from autokernel.errors import ConfigError, KernelFileError, ProposerError
from autokernel.kernelfile import MAX_SOURCE_BYTES, parse_source
from autokernel.proposers.answers import ReplyError, read_answer
from autokernel.proposers.base import KernelContext, Proposal
from autokernel.proposers.costs import Budget, price_for
from autokernel.proposers.prompt import FailedAnswer, build_prompt, source_tokens
from autokernel.proposers.providers import CallFailed, ChatReply, Choice, make_provider
from autokernel.redact import redact

ANSWER_STATUSES = ("no_code", "ambiguous", "edit_failed", "truncated", "unchanged", "syntax_error", "too_large")
PROSE_TOKENS = 3000  # the DESCRIPTION line, reasoning text and fences around the file
MIN_ANSWER_TOKENS = 4096
CHOICE_SEPARATOR = "\n\n===== choice {n} =====\n\n"


def answer_budget(source: str, cap: int) -> int:
    """max_tokens for one answer: room for the whole file with a margin, capped by the endpoint's limit."""
    return max(min(cap, MIN_ANSWER_TOKENS), min(cap, int(source_tokens(source) * 1.25) + PROSE_TOKENS))


class LLMProposer:
    name = "llm"
    writes_source = True

    def __init__(self, *, store=None, run_id: int | None = None, provider: str | None = None,
                 model: str | None = None, client=None, recent: int = 8, candidates: int = 1,
                 temperature: Optional[float] = 0.7, max_llm_calls: int | None = None,
                 max_cost: float | None = None, price: str | None = None):
        """Checks the whole configuration (endpoint, key, model, price, limits) before any work."""
        if candidates < 1:
            raise ConfigError("--candidates must be at least 1")
        self.client = client or make_provider(provider, model, temperature=temperature)
        self.price = price_for(self.client.model, price)
        self.budget = Budget(max_llm_calls, max_cost)
        self.budget.validate(self.price, self.client.model)
        self.store = store
        self.run_id = run_id
        self.recent = recent
        self.candidates = candidates
        self._calls: list[dict[str, Any]] = []  # without a store: this session's calls, for the budget and feedback

    # -- the record ----------------------------------------------------------------------------

    def _record(self, kernel: Optional[KernelContext], *, prompt: str, reply: Optional[str] = None,
                **fields) -> Optional[int]:
        fields["error"] = redact(fields.get("error"))
        fields.setdefault("cost_usd", None)
        if self.price is not None and fields.get("status") not in ("fatal",):
            fields["cost_usd"] = self.price.cost(fields.get("prompt_tokens"), fields.get("completion_tokens"),
                                                 len(prompt) if fields.get("http_status") == 200 else 0,
                                                 len(reply or ""))
        self._calls.append({**fields, "kernel_id": kernel.kernel_id if kernel else None, "created_at": None})
        if self.store is None:
            return None
        row = self.store.add_llm_call(run_id=self.run_id, kernel_id=kernel.kernel_id if kernel else None,
                                      provider=self.client.name, model=self.client.model,
                                      prompt=redact(prompt), reply=redact(reply), **fields)
        return row.id

    def _set_status(self, call_id: Optional[int], status: str, error: Optional[str]) -> None:
        self._calls[-1].update(status=status, error=error)
        if self.store is not None and call_id is not None:
            self.store.update_llm_call(call_id, status=status, error=redact(error))

    def _check_budget(self) -> None:
        if self.store is not None and self.run_id is not None:
            calls, cost, _ = self.store.llm_usage(self.run_id)
        else:
            calls, cost = len(self._calls), sum(c.get("cost_usd") or 0.0 for c in self._calls)
        self.budget.check(calls, cost)

    def failed_answers(self, kernel: Optional[KernelContext]) -> list[FailedAnswer]:
        """This kernel's answers that gave no candidate, oldest first (what the next prompt reports)."""
        if self.store is not None and kernel is not None and kernel.kernel_id is not None:
            rows = [(c.status, c.error, c.created_at) for c in self.store.list_llm_calls(
                kernel_id=kernel.kernel_id, texts=False, statuses=ANSWER_STATUSES, last=10)]
        else:
            kid = kernel.kernel_id if kernel else None
            rows = [(c["status"], c.get("error"), c["created_at"]) for c in self._calls if c["kernel_id"] == kid]
        return [FailedAnswer(s, e or "", t) for s, e, t in rows if s in ANSWER_STATUSES][-10:]

    # -- one call ------------------------------------------------------------------------------

    def _call(self, system: str, user: str, n: int, max_tokens: int,
              kernel: Optional[KernelContext]) -> tuple[ChatReply, Optional[int]]:
        prompt = f"{system}\n\n{user}"
        meta = dict(prompt_sha=hashlib.sha256(prompt.encode()).hexdigest()[:16], max_tokens=max_tokens,
                    temperature=self.client.temperature, candidates=n)
        t0 = time.monotonic()
        try:
            reply = self.client.complete(system, user, n=n, max_tokens=max_tokens)
        except CallFailed as exc:
            self._record(kernel, prompt=prompt, status=exc.status, http_status=exc.http_status,
                         attempts=max(1, exc.attempts), latency_s=exc.latency_s, error=exc.one_line()[:2000], **meta)
            raise
        except KeyboardInterrupt:
            self._record(kernel, prompt=prompt, status="interrupted", attempts=max(1, self.client.attempts),
                         latency_s=time.monotonic() - t0, error="interrupted by the user during the call", **meta)
            raise
        meta.update(max_tokens=reply.params.get("max_tokens", reply.params.get("max_completion_tokens", max_tokens)),
                    temperature=reply.params.get("temperature"))
        text = "".join((CHOICE_SEPARATOR.format(n=i + 1) if len(reply.choices) > 1 else "") + c.text
                       for i, c in enumerate(reply.choices))
        call_id = self._record(kernel, prompt=prompt, reply=text, status="ok", http_status=reply.http_status,
                               attempts=reply.attempts, prompt_tokens=reply.prompt_tokens,
                               completion_tokens=reply.completion_tokens, latency_s=reply.latency_s,
                               finish_reason=reply.finish_reason, **meta)
        return reply, call_id

    def _candidate(self, choice: Choice, source: str, current, call_id: Optional[int]) -> Proposal:
        answer = read_answer(choice.text, source, choice.finish_reason)
        size = len(answer.source.encode())
        if size > MAX_SOURCE_BYTES:
            raise ReplyError(f"the new kernel.py is {size} bytes, over the {MAX_SOURCE_BYTES}-byte limit", "too_large")
        try:
            kf = parse_source(answer.source)
            if (kf.kernel_type, kf.backend) != (current.kernel_type, current.backend):
                raise KernelFileError(f"the file declares {kf.kernel_type}/{kf.backend}, "
                                      f"not {current.kernel_type}/{current.backend}")
        except KernelFileError as exc:
            raise ReplyError(f"the new kernel.py is not a usable kernel file: {exc.one_line()}",
                             "syntax_error") from exc
        unit = {"search_replace": "edit(s)", "diff": "hunk(s)"}.get(answer.form)
        how = f" ({answer.edits} {unit})" if unit else ""
        description = redact(answer.description) or f"llm {self.client.model}{how}"
        return Proposal(source=answer.source, description=description, config=kf.config, llm_call_id=call_id)

    # -- the proposer interface ----------------------------------------------------------------

    def propose(self, source: str, spec: Any = None, history: Sequence[Any] = (), last_result: Any = None, *,
                kernel: Optional[KernelContext] = None) -> Proposal | list[Proposal]:
        current = parse_source(source)
        # a pool asks for as many as it has free judges (kernel.batch), --candidates at least
        want = max(self.candidates, kernel.batch) if kernel else self.candidates
        n = max(1, min(want, kernel.max_candidates or want) if kernel else want)
        max_tokens = answer_budget(source, self.client.max_tokens)
        system, user = build_prompt(source, spec, history, last_result, kernel, recent=self.recent,
                                    answers=self.failed_answers(kernel), max_tokens=max_tokens)
        proposals: list[Proposal] = []
        errors: list[ReplyError] = []
        requests = 1 if getattr(self.client, "supports_n", False) else n
        for _ in range(requests):
            if proposals:
                try:
                    self._check_budget()
                except ProposerError:
                    break  # the budget ends the batch early; what came back is still judged
            else:
                self._check_budget()
            reply, call_id = self._call(system, user, n if requests == 1 else 1, max_tokens, kernel)
            mine: list[ReplyError] = []
            for i, choice in enumerate(reply.choices, 1):
                try:
                    proposals.append(self._candidate(choice, source, current, call_id))
                except ReplyError as exc:
                    tag = f"choice {i}: " if len(reply.choices) > 1 else ""
                    mine.append(ReplyError(f"{tag}{exc}", exc.status))
            if mine:
                usable = len(reply.choices) - len(mine)
                self._set_status(call_id, "ok" if usable else mine[0].status, "; ".join(str(e) for e in mine)[:2000])
                errors += mine
        if not proposals:
            raise ProposerError(f"the LLM answer gave no candidate: {errors[0]}" if errors else "no answer")
        return proposals if len(proposals) > 1 else proposals[0]
