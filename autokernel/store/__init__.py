"""SQLite experiment store (SQLModel). Never imports torch."""

from autokernel.store.store import FINAL_STATUSES, Store, open_store
from autokernel.store.tables import Device, Experiment, Judge, Kernel, LLMCall, Profile, Run

__all__ = ["Store", "open_store", "FINAL_STATUSES", "Run", "Profile", "Kernel", "Experiment", "Device", "LLMCall", "Judge"]
