"""Secrets out of everything AutoKernel stores or prints.

An endpoint's error body may echo the API key it was sent ("Incorrect API key provided: sk-..."),
and a model may repeat one it was shown. Every text that reaches the store, the terminal or a git
commit from the LLM path goes through `redact`, which replaces the value of each configured secret
with a marker naming its variable. The configured secrets are read from the environment at call
time: the variables the bench also strips from its child (bench.isolation.is_secret), with values
long enough to be credentials (a short value such as TOKENIZERS_PARALLELISM=false is not one) and
not paths.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

# variables that hold the keys AutoKernel itself is configured with: redacted from 8 characters on;
# other secret-looking variables from 16 (long enough that no ordinary word or flag matches)
PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MIN_PROVIDER_KEY = 8
MIN_OTHER_SECRET = 16


def configured_secrets(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """value -> variable name of every configured secret, longest value first."""
    from autokernel.bench.isolation import is_secret

    env = os.environ if env is None else env
    found = {}
    for name, value in env.items():
        value = (value or "").strip()
        floor = MIN_PROVIDER_KEY if name.upper() in PROVIDER_KEYS else MIN_OTHER_SECRET
        path_like = value.startswith(("/", "~", "."))
        if len(value) >= floor and (name.upper() in PROVIDER_KEYS or is_secret(name)) and not path_like:
            found.setdefault(value, name)
    return dict(sorted(found.items(), key=lambda kv: -len(kv[0])))


def redact(text: Optional[str], env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """`text` with every configured secret's value replaced by [REDACTED:<variable>]."""
    if not text:
        return text
    for value, name in configured_secrets(env).items():
        if value in text:
            text = text.replace(value, f"[REDACTED:{name}]")
    return text
