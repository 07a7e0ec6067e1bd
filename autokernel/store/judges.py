"""The store's judges rows (a pooled session's workers, one per GPU): a part of Store, kept apart so
store.py stays one screen of plumbing per table. Only the coordinating process calls these."""

from __future__ import annotations

from typing import Optional

from autokernel.store.base import StoreBase, select_where
from autokernel.store.tables import Judge


class JudgeRows(StoreBase):
    """add_judge / update_judge / list_judges on the Store (uses its _add, _update and session)."""

    def add_judge(self, **fields) -> Judge:
        return self._add(Judge(**fields))

    def update_judge(self, judge_id: int, **fields) -> Judge:
        return self._update(Judge, judge_id, **fields)

    def list_judges(self, run_id: Optional[int] = None) -> list[Judge]:
        with self.session() as s:
            q = select_where(Judge, run_id=run_id)
            return list(s.exec(q.order_by(Judge.run_id, Judge.id)))
