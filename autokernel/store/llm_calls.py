"""The store's LLM calls rows (prompts and replies kept zlib-compressed): a part of Store, kept
apart so store.py stays one screen of plumbing per table."""

from __future__ import annotations

import zlib

from sqlalchemy import func
from sqlalchemy.orm import defer
from sqlmodel import select

from autokernel.store.base import StoreBase, select_where
from autokernel.store.tables import LLMCall


class LLMCallRows(StoreBase):
    """add_llm_call / get_llm_call / update_llm_call / list_llm_calls / llm_usage / llm_call_texts."""

    def add_llm_call(self, *, prompt: str | None = None, reply: str | None = None, **fields) -> LLMCall:
        """One call; `prompt` and `reply` text are stored zlib-compressed (read with llm_call_texts)."""
        return self._add(LLMCall(**fields, prompt_gz=_pack(prompt), reply_gz=_pack(reply)))

    def get_llm_call(self, call_id: int) -> LLMCall:
        return self._get(LLMCall, call_id, "llm call")

    def update_llm_call(self, call_id: int, *, reply: str | None = None, **fields) -> LLMCall:
        return self._update(LLMCall, call_id, **fields, **({"reply_gz": _pack(reply)} if reply is not None else {}))

    def list_llm_calls(self, run_id: int | None = None, kernel_id: int | None = None, *, texts: bool = True,
                       statuses: tuple[str, ...] | None = None, last: int | None = None) -> list[LLMCall]:
        """Calls in order; `texts=False` leaves the prompt and reply blobs unread (and unreadable on the
        rows returned), `statuses` keeps only those, `last` keeps the newest N."""
        with self.session() as s:
            q = select_where(LLMCall, run_id=run_id, kernel_id=kernel_id)
            if not texts:
                q = q.options(defer(LLMCall.prompt_gz), defer(LLMCall.reply_gz))
            if statuses is not None:
                q = q.where(LLMCall.status.in_(statuses))
            if last is not None:
                return list(reversed(list(s.exec(q.order_by(LLMCall.id.desc()).limit(last)))))
            return list(s.exec(q.order_by(LLMCall.id)))

    def llm_usage(self, run_id: int) -> tuple[int, float, float]:
        """(calls, cost in USD of those with a price, seconds waited) of a run's LLM calls."""
        with self.session() as s:
            row = s.exec(select(func.count(LLMCall.id), func.coalesce(func.sum(LLMCall.cost_usd), 0.0),
                                func.coalesce(func.sum(LLMCall.latency_s), 0.0))
                         .where(LLMCall.run_id == run_id)).one()
        return int(row[0]), float(row[1]), float(row[2])

    @staticmethod
    def llm_call_texts(call: LLMCall) -> tuple[str | None, str | None]:
        """(prompt, reply) text of a call, as stored."""
        return _unpack(call.prompt_gz), _unpack(call.reply_gz)


def _pack(text: str | None) -> bytes | None:
    return None if text is None else zlib.compress(text.encode(), 6)


def _unpack(blob: bytes | None) -> str | None:
    return None if blob is None else zlib.decompress(blob).decode(errors="replace")
