"""Typed errors. Library code raises these; only the CLI turns them into one-line messages.

Each class carries its own process exit code so scripts can tell failures apart. Codes 1 and 2
are left to Python and Typer (uncaught exception, usage error).
"""

from __future__ import annotations


class AutoKernelError(Exception):
    """Base of every error AutoKernel reports to the user."""

    exit_code = 3

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def one_line(self) -> str:
        text = " ".join(str(self).split())
        return f"{text} ({self.hint})" if self.hint else text


class ConfigError(AutoKernelError):
    """Bad option, missing environment variable, unusable home directory."""

    exit_code = 4


class StoreError(AutoKernelError):
    """The SQLite store cannot be opened, read or written."""

    exit_code = 5


class SchemaTooNewError(StoreError):
    """The database was written by a newer AutoKernel; it is refused, never altered."""

    exit_code = 6


class NotFoundError(AutoKernelError):
    """A run, profile, kernel, experiment or problem that the user named does not exist."""

    exit_code = 7


class WorkspaceError(AutoKernelError):
    """The git workspace is broken or a git operation failed."""

    exit_code = 8


class ModelError(AutoKernelError):
    """Unknown model, model not available offline, bad factory."""

    exit_code = 9


class KernelFileError(AutoKernelError):
    """A kernel file that cannot be loaded: syntax error, missing entry point, bad constants."""

    exit_code = 10


class BenchError(AutoKernelError):
    """The bench itself could not run (not: the kernel was wrong, which is a result)."""

    exit_code = 11


class IncorrectKernelError(AutoKernelError):
    """The kernel ran and was judged incorrect (or crashed, hung, cheated)."""

    exit_code = 12


class VerifyMismatchError(AutoKernelError):
    """The optimized model's outputs differ from the original's."""

    exit_code = 13


class ProposerError(AutoKernelError):
    """A proposer could not produce a candidate (search space exhausted, unusable LLM reply)."""

    exit_code = 14


class LLMError(ProposerError):
    """The LLM endpoint failed: timeout, HTTP error after retries, malformed reply. `fatal`: the
    endpoint refuses the configuration itself (a rejected key, a forbidden or unknown model, a
    parameter it does not take); asking again cannot help, so the run stops at once."""

    exit_code = 15
    fatal = False


class KernelBenchError(AutoKernelError):
    """KernelBench problems not found or malformed."""

    exit_code = 16


class ExportError(AutoKernelError):
    """The export could not be written or pushed."""

    exit_code = 17


class LockHeldError(AutoKernelError):
    """Another live process is already working on this run or model (one writer per run)."""

    exit_code = 18
