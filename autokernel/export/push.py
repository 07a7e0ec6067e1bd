"""Upload an export to the Hub with huggingface_hub, as a `kernel` repository."""

from __future__ import annotations

import os
from pathlib import Path

from autokernel.errors import ExportError

REPO_TYPE = "kernel"


def push_folder(folder: Path, repo_id: str, *, version: int = 1, token: str | None = None,
                endpoint: str | None = None, private: bool = False) -> str:
    """Create (or reuse) the kernel repository and upload `folder` to its main branch and to the
    `v<version>` branch that `get_kernel(..., version=N)` resolves. Returns the commit URL.

    The token comes from the argument, HF_TOKEN, or the huggingface_hub login; the local export
    is never touched, whatever fails."""
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise ExportError("huggingface_hub is not installed") from exc
    api = HfApi(endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None, token=token)
    try:
        api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
        info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type=REPO_TYPE,
                                 commit_message=f"AutoKernel export of {repo_id}",
                                 ignore_patterns=["**/__pycache__/**", "*.pyc"])
        branch = f"v{version}"
        api.create_branch(repo_id, branch=branch, repo_type=REPO_TYPE, exist_ok=True)
        api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type=REPO_TYPE, revision=branch,
                          commit_message=f"AutoKernel export of {repo_id} (version {version})",
                          ignore_patterns=["**/__pycache__/**", "*.pyc"])
    except HfHubHTTPError as exc:
        raise ExportError(f"push to {repo_id} failed: {str(exc).splitlines()[0]}",
                          hint=f"the local export in {folder} is intact") from exc
    except OSError as exc:  # connection refused, DNS failure, offline
        raise ExportError(f"push to {repo_id} failed: cannot reach the Hub ({type(exc).__name__}: {exc})",
                          hint=f"the local export in {folder} is intact") from exc
    except Exception as exc:  # requests/httpx wrap network errors in their own classes
        if "connect" in type(exc).__name__.lower() or "timeout" in type(exc).__name__.lower():
            raise ExportError(f"push to {repo_id} failed: cannot reach the Hub ({type(exc).__name__})",
                              hint=f"the local export in {folder} is intact") from exc
        raise
    return getattr(info, "commit_url", str(info))
