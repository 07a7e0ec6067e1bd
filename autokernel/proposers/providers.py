"""HTTP clients for the LLM proposer: an OpenAI-compatible chat-completions endpoint (OpenAI, vLLM,
llama.cpp, Ollama...) and Anthropic's messages API, both through httpx.

Keys are read from the environment at call time and go only into request headers: they are never
returned, logged, put in an error message or stored. Each call has a timeout and is retried with
exponential backoff on timeouts, connection errors, 429 and 5xx (a Retry-After header wins over
the backoff); the reply carries the attempt count, token counts and latency for the store.

Environment: OPENAI_BASE_URL (default https://api.openai.com/v1), OPENAI_API_KEY,
ANTHROPIC_BASE_URL (default https://api.anthropic.com), ANTHROPIC_API_KEY, AUTOKERNEL_LLM_MODEL,
AUTOKERNEL_LLM_PROVIDER (openai | anthropic), AUTOKERNEL_LLM_TIMEOUT_S, AUTOKERNEL_LLM_RETRIES,
AUTOKERNEL_LLM_BACKOFF_S.
"""

from __future__ import annotations

import email.utils
import os
import time
from dataclasses import dataclass
from typing import Any, Optional

import httpx

from autokernel.errors import ConfigError, LLMError

PROVIDERS = ("openai", "anthropic")
ANTHROPIC_VERSION = "2023-06-01"


@dataclass
class ChatReply:
    text: str
    prompt_tokens: Optional[int]
    completion_tokens: Optional[int]
    http_status: int
    attempts: int
    latency_s: float


class CallFailed(LLMError):
    """The endpoint gave no usable reply after the retries; carries what the store records."""

    def __init__(self, message: str, *, status: str, http_status: int | None, attempts: int, latency_s: float):
        super().__init__(message)
        self.status = status  # timeout | http_error
        self.http_status = http_status
        self.attempts = attempts
        self.latency_s = latency_s


def _retry_after(resp: httpx.Response) -> Optional[float]:
    raw = resp.headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        when = email.utils.parsedate_to_datetime(raw)
        return max(0.0, when.timestamp() - time.time()) if when else None


class _HTTPProvider:
    name = ""

    def __init__(self, model: str, *, base_url: str, timeout_s: float = 300.0, retries: int = 3,
                 backoff_s: float = 2.0, max_tokens: int = 8192, temperature: float = 0.7):
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_tokens = max_tokens
        self.temperature = temperature

    def _request(self) -> tuple[str, dict[str, str]]:
        raise NotImplementedError

    def _body(self, system: str, user: str) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, data: dict[str, Any]) -> tuple[str, Optional[int], Optional[int]]:
        raise NotImplementedError

    def complete(self, system: str, user: str) -> ChatReply:
        url, headers = self._request()
        body = self._body(system, user)
        t0 = time.monotonic()
        last_status: Optional[int] = None
        last_error = ""
        kind = "http_error"
        attempt = 0
        with httpx.Client(timeout=httpx.Timeout(self.timeout_s, connect=min(30.0, self.timeout_s))) as client:
            for attempt in range(1, self.retries + 2):
                wait = self.backoff_s * (2 ** (attempt - 1))
                try:
                    resp = client.post(url, headers=headers, json=body)
                except httpx.TimeoutException:
                    kind, last_status, last_error = "timeout", None, f"no reply within {self.timeout_s:g} s"
                except httpx.TransportError as exc:
                    kind, last_status, last_error = "http_error", None, f"connection failed: {type(exc).__name__}"
                else:
                    last_status = resp.status_code
                    if resp.status_code == 200:
                        try:
                            text, pt, ct = self._parse(resp.json())
                        except (ValueError, KeyError, IndexError, TypeError) as exc:
                            raise CallFailed(f"{self.name} reply is not a chat completion: {exc}", status="http_error",
                                             http_status=200, attempts=attempt,
                                             latency_s=time.monotonic() - t0) from exc
                        return ChatReply(text=text, prompt_tokens=pt, completion_tokens=ct, http_status=200,
                                         attempts=attempt, latency_s=time.monotonic() - t0)
                    kind, last_error = "http_error", f"HTTP {resp.status_code}: {resp.text[:300]}"
                    if resp.status_code != 429 and resp.status_code < 500:
                        break  # 4xx other than 429 will not get better by asking again
                    wait = _retry_after(resp) if _retry_after(resp) is not None else wait
                if attempt <= self.retries:
                    time.sleep(min(wait, 120.0))
        raise CallFailed(f"{self.name} {self.model}: {last_error} (after {attempt} attempt(s))", status=kind,
                         http_status=last_status, attempts=attempt, latency_s=time.monotonic() - t0)


class OpenAIProvider(_HTTPProvider):
    name = "openai"

    def _request(self):
        headers = {"content-type": "application/json"}
        key = os.environ.get("OPENAI_API_KEY")
        if key:  # local servers (vLLM, llama.cpp, Ollama) often need none
            headers["authorization"] = f"Bearer {key}"
        return f"{self.base_url}/chat/completions", headers

    def _body(self, system, user):
        return {"model": self.model, "temperature": self.temperature, "max_tokens": self.max_tokens,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}

    def _parse(self, data):
        text = data["choices"][0]["message"]["content"] or ""
        usage = data.get("usage") or {}
        return text, usage.get("prompt_tokens"), usage.get("completion_tokens")


class AnthropicProvider(_HTTPProvider):
    name = "anthropic"

    def _request(self):
        key = os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise ConfigError("ANTHROPIC_API_KEY is not set", hint="export it, or use --provider openai")
        return f"{self.base_url}/v1/messages", {"content-type": "application/json", "x-api-key": key,
                                                "anthropic-version": ANTHROPIC_VERSION}

    def _body(self, system, user):
        return {"model": self.model, "max_tokens": self.max_tokens, "temperature": self.temperature,
                "system": system, "messages": [{"role": "user", "content": user}]}

    def _parse(self, data):
        text = "".join(part.get("text", "") for part in data["content"] if part.get("type") == "text")
        usage = data.get("usage") or {}
        return text, usage.get("input_tokens"), usage.get("output_tokens")


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number") from exc


def make_provider(provider: str | None = None, model: str | None = None) -> _HTTPProvider:
    """--provider / $AUTOKERNEL_LLM_PROVIDER, else anthropic when only ANTHROPIC_API_KEY is set,
    else openai. --llm-model / $AUTOKERNEL_LLM_MODEL is required."""
    name = provider or os.environ.get("AUTOKERNEL_LLM_PROVIDER")
    if not name:
        only_anthropic = os.environ.get("ANTHROPIC_API_KEY") and not os.environ.get("OPENAI_API_KEY")
        name = "anthropic" if only_anthropic else "openai"
    if name not in PROVIDERS:
        raise ConfigError(f"unknown LLM provider {name!r}; use one of {', '.join(PROVIDERS)}")
    model = model or os.environ.get("AUTOKERNEL_LLM_MODEL")
    if not model:
        raise ConfigError("no LLM model named", hint="pass --llm-model NAME or set AUTOKERNEL_LLM_MODEL")
    common = dict(timeout_s=_env_float("AUTOKERNEL_LLM_TIMEOUT_S", 300.0),
                  retries=int(_env_float("AUTOKERNEL_LLM_RETRIES", 3)),
                  backoff_s=_env_float("AUTOKERNEL_LLM_BACKOFF_S", 2.0))
    if name == "openai":
        return OpenAIProvider(model, base_url=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"), **common)
    return AnthropicProvider(model, base_url=os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com"), **common)
