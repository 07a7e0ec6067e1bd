"""HTTP clients for the LLM proposer: an OpenAI-compatible chat-completions endpoint (OpenAI, vLLM,
llama.cpp, Ollama...) and Anthropic's messages API, both through httpx, retried by tenacity.

Why httpx and not the official SDKs: each protocol is one POST whose JSON we read ourselves, and
what the store needs (every attempt counted, the raw error body to redact, the finish reason,
parameter fixes for endpoints that refuse one) is easier to have from the raw exchange; the SDKs
would add about nine packages (pydantic, jiter, anyio, httpx2, opentelemetry...) that the GPU
machine, which has no package index, lacks. tenacity (pure Python, no dependencies) does the retry
policy.

Keys are read from the environment and go only into request headers; every text that comes back
(replies, error bodies) passes through autokernel.redact before anyone sees it. A call is retried
with jittered exponential backoff on timeouts, connection errors, 408/409/425/429 and 5xx; a
Retry-After (seconds or HTTP date) or retry-after-ms header wins over the backoff, and one that
cannot be read is ignored. Other 4xx are the configuration's fault and raise EndpointRejected (fatal: the
run stops), except: a prompt over the context length (its own kernel's problem), and a 400/422 that
names a parameter the model does not take, which is fixed once and asked again (max_tokens ->
max_completion_tokens, a temperature the model refuses dropped, max_tokens lowered to the
model's limit); the fix holds for the rest of the session.

Environment: OPENAI_BASE_URL (default https://api.openai.com/v1), OPENAI_API_KEY,
ANTHROPIC_BASE_URL (default https://api.anthropic.com), ANTHROPIC_API_KEY, AUTOKERNEL_LLM_MODEL,
AUTOKERNEL_LLM_PROVIDER (openai | anthropic), AUTOKERNEL_LLM_TIMEOUT_S, AUTOKERNEL_LLM_RETRIES,
AUTOKERNEL_LLM_BACKOFF_S, AUTOKERNEL_LLM_MAX_TOKENS (the most one answer may use).
"""

from __future__ import annotations

import email.utils
import math
import os
import re
import time
from dataclasses import dataclass, field
from datetime import timezone
from typing import Any, Optional

import httpx
import tenacity

from autokernel.errors import ConfigError, LLMError
from autokernel.redact import redact

PROVIDERS = ("openai", "anthropic")
ANTHROPIC_VERSION = "2023-06-01"
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
MAX_WAIT_S = 120.0  # the longest pause between attempts, whatever Retry-After says
MAX_TOKENS_CAP = 32000
RETRY_STATUSES = (408, 409, 425, 429)  # and every 5xx
_TOO_LONG = re.compile(r"context.length|context_length_exceeded|prompt is too long|too many (input )?tokens|"
                       r"maximum context", re.IGNORECASE)
TRUNCATED = ("length", "max_tokens")  # finish reasons of an answer cut at the token budget


@dataclass
class Choice:
    text: str
    finish_reason: Optional[str] = None

    @property
    def truncated(self) -> bool:
        return self.finish_reason in TRUNCATED


@dataclass
class ChatReply:
    choices: list[Choice]
    prompt_tokens: Optional[int]
    completion_tokens: Optional[int]
    http_status: int
    attempts: int
    latency_s: float
    params: dict[str, Any] = field(default_factory=dict)  # what went out in the end (max_tokens, temperature, n)

    @property
    def text(self) -> str:
        return self.choices[0].text if self.choices else ""

    @property
    def finish_reason(self) -> Optional[str]:
        return ",".join(sorted({c.finish_reason or "?" for c in self.choices})) or None


class CallFailed(LLMError):
    """The endpoint gave no usable reply; carries what the store records. `status`: timeout |
    http_error | too_long | bad_reply | fatal."""

    def __init__(self, message: str, *, status: str, http_status: int | None, attempts: int, latency_s: float):
        super().__init__(redact(message))
        self.status = status
        self.http_status = http_status
        self.attempts = attempts
        self.latency_s = latency_s


class EndpointRejected(CallFailed):
    """401/403/404/400...: the key, the model or a parameter is refused; the run stops at once."""

    fatal = True


class _Retry(Exception):
    """One attempt failed in a way another attempt may not."""

    def __init__(self, kind: str, http_status: Optional[int], error: str, retry_after: Optional[float] = None):
        super().__init__(error)
        self.kind, self.http_status, self.error, self.retry_after = kind, http_status, error, retry_after


def retry_after_s(headers) -> Optional[float]:
    """Seconds the server asks us to wait (retry-after-ms, Retry-After seconds or HTTP date), or
    None when it asks nothing readable (then the backoff decides)."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        raw = (headers.get(name) or "").strip()
        if not raw:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            if scale != 1.0:
                continue
            try:
                when = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError, IndexError, OverflowError):
                continue
            if when is None:
                continue
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            value = when.timestamp() - time.time()
        if math.isfinite(value):
            return max(0.0, value)
    return None


def error_message(resp: httpx.Response) -> str:
    """The endpoint's own words: error.message of a JSON body, else the start of the body."""
    try:
        data = resp.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
    return " ".join(resp.text.split())[:500] or resp.reason_phrase


def fatal_hint(status: int, key_var: str) -> str:
    if status == 401:
        return f"the endpoint rejected the key: check {key_var}"
    if status == 403:
        return "the key may not use this model or endpoint"
    if status == 404:
        return "check the model name (--llm-model) and the base URL"
    return "the endpoint refuses the request as configured"


class HTTPProvider:
    """One chat endpoint. Subclasses say where to POST, how to write the body and read the reply."""

    name = ""
    key_var = ""
    supports_n = False  # several candidates from one request

    def __init__(self, model: str, *, base_url: str, timeout_s: float = 300.0, retries: int = 3,
                 backoff_s: float = 2.0, max_tokens: int = MAX_TOKENS_CAP, temperature: Optional[float] = 0.7):
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_tokens = max_tokens  # the cap; each call asks for what its file needs, up to this
        self.temperature = temperature
        self.token_param = "max_tokens"
        self.attempts = 0  # of the call in flight: what an interrupted call has used

    # -- per protocol -----------------------------------------------------------------------------

    def _request(self) -> tuple[str, dict[str, str]]:
        raise NotImplementedError

    def _body(self, system: str, user: str, n: int, max_tokens: int) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, data: dict[str, Any]) -> tuple[list[Choice], Optional[int], Optional[int]]:
        raise NotImplementedError

    # -- shared -----------------------------------------------------------------------------------

    def _adapt(self, body: dict[str, Any], message: str, done: set[str]) -> bool:
        """Fix a parameter the endpoint refused (once per kind per call); True when the body changed."""
        low = message.lower()
        if "max_tokens" in body and "max_completion_tokens" in low and "rename" not in done:
            done.add("rename")
            self.token_param = "max_completion_tokens"
            body["max_completion_tokens"] = body.pop("max_tokens")
            return True
        if ("temperature" in body and "temperature" in low and "temperature" not in done
                and re.search(r"unsupported|not support|only the default|does not support", low)):
            done.add("temperature")
            self.temperature = None
            body.pop("temperature")
            return True
        m = re.search(r"(?:at most|maximum[^0-9]{0,40}|>)\s*(\d{3,7})", low)
        if m and self.token_param in body and ("max_tokens" in low or "max_completion_tokens" in low) \
                and "limit" not in done and int(m.group(1)) < body[self.token_param]:
            done.add("limit")
            self.max_tokens = body[self.token_param] = int(m.group(1))
            return True
        return False

    def _post(self, client: httpx.Client, url: str, headers: dict[str, str], body: dict[str, Any],
              t0: float) -> httpx.Response:
        done: set[str] = set()
        while True:
            try:
                resp = client.post(url, headers=headers, json=body)
            except httpx.TimeoutException:
                raise _Retry("timeout", None, f"no reply within {self.timeout_s:g} s") from None
            except httpx.TransportError as exc:
                raise _Retry("http_error", None, f"connection failed: {type(exc).__name__}: {exc}") from None
            code = resp.status_code
            if code == 200:
                return resp
            message = error_message(resp)
            if code in RETRY_STATUSES or code >= 500:
                raise _Retry("http_error", code, f"HTTP {code}: {message}", retry_after_s(resp.headers))
            fields = dict(http_status=code, attempts=self.attempts, latency_s=time.monotonic() - t0)
            if code == 413 or _TOO_LONG.search(message):
                raise CallFailed(f"{self.name} {self.model}: the prompt is too long: HTTP {code}: {message}",
                                 status="too_long", **fields)
            if code in (400, 422) and self._adapt(body, message, done):
                continue
            raise EndpointRejected(f"{self.name} {self.model}: HTTP {code}: {message} "
                                   f"({fatal_hint(code, self.key_var)})", status="fatal", **fields)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = getattr(exc, "retry_after", None)
        if asked is not None:
            return min(asked, MAX_WAIT_S)
        return tenacity.wait_exponential_jitter(initial=self.backoff_s, max=MAX_WAIT_S,
                                                jitter=self.backoff_s)(state)

    def complete(self, system: str, user: str, *, n: int = 1, max_tokens: Optional[int] = None) -> ChatReply:
        """One chat completion (n choices where the protocol has them), retried as the module says."""
        url, headers = self._request()
        budget = min(max_tokens or self.max_tokens, self.max_tokens)
        body = self._body(system, user, n if self.supports_n else 1, budget)
        t0 = time.monotonic()
        self.attempts = 0
        retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(self.retries + 1), wait=self._wait,
                                     retry=tenacity.retry_if_exception_type(_Retry), reraise=True)
        with httpx.Client(timeout=httpx.Timeout(self.timeout_s, connect=min(30.0, self.timeout_s))) as client:
            try:
                for attempt in retrying:
                    with attempt:
                        self.attempts = attempt.retry_state.attempt_number
                        resp = self._post(client, url, headers, body, t0)
            except _Retry as exc:
                raise CallFailed(f"{self.name} {self.model}: {exc.error} (after {self.attempts} attempt(s))",
                                 status=exc.kind, http_status=exc.http_status, attempts=self.attempts,
                                 latency_s=time.monotonic() - t0) from None
        try:
            choices, pt, ct = self._parse(resp.json())
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise CallFailed(f"{self.name} reply is not a chat completion: {type(exc).__name__}: {exc}",
                             status="bad_reply", http_status=200, attempts=self.attempts,
                             latency_s=time.monotonic() - t0) from None
        for c in choices:
            c.text = redact(c.text or "") or ""
        params = {k: body[k] for k in ("max_tokens", "max_completion_tokens", "temperature", "n") if k in body}
        return ChatReply(choices=choices, prompt_tokens=pt, completion_tokens=ct, http_status=200,
                         attempts=self.attempts, latency_s=time.monotonic() - t0, params=params)


class OpenAIProvider(HTTPProvider):
    name = "openai"
    key_var = "OPENAI_API_KEY"
    supports_n = True

    def _request(self):
        headers = {"content-type": "application/json"}
        key = os.environ.get("OPENAI_API_KEY")
        if key:  # local servers (vLLM, llama.cpp, Ollama) often need none
            headers["authorization"] = f"Bearer {key}"
        return f"{self.base_url}/chat/completions", headers

    def _body(self, system, user, n, max_tokens):
        body = {"model": self.model, self.token_param: max_tokens,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if n > 1:
            body["n"] = n
        return body

    def _parse(self, data):
        choices = [Choice((c.get("message") or {}).get("content") or "", c.get("finish_reason"))
                   for c in data["choices"]]
        if not choices:
            raise ValueError("no choices")
        usage = data.get("usage") or {}
        return choices, usage.get("prompt_tokens"), usage.get("completion_tokens")


class AnthropicProvider(HTTPProvider):
    name = "anthropic"
    key_var = "ANTHROPIC_API_KEY"

    def _request(self):
        return f"{self.base_url}/v1/messages", {"content-type": "application/json",
                                                "x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""),
                                                "anthropic-version": ANTHROPIC_VERSION}

    def _body(self, system, user, n, max_tokens):
        body = {"model": self.model, "max_tokens": max_tokens, "system": system,
                "messages": [{"role": "user", "content": user}]}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def _parse(self, data):
        text = "".join(part.get("text", "") for part in data["content"] if part.get("type") == "text")
        usage = data.get("usage") or {}
        return [Choice(text, data.get("stop_reason"))], usage.get("input_tokens"), usage.get("output_tokens")


def _env_number(name: str, default: float, kind=float):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return kind(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number, not {raw!r}") from exc


def provider_name(provider: str | None) -> str:
    """--provider / $AUTOKERNEL_LLM_PROVIDER, else anthropic when only ANTHROPIC_API_KEY is set, else openai."""
    name = provider or os.environ.get("AUTOKERNEL_LLM_PROVIDER")
    if not name:
        only_anthropic = os.environ.get("ANTHROPIC_API_KEY") and not os.environ.get("OPENAI_API_KEY")
        name = "anthropic" if only_anthropic else "openai"
    if name not in PROVIDERS:
        raise ConfigError(f"unknown LLM provider {name!r}; use one of {', '.join(PROVIDERS)}")
    return name


def make_provider(provider: str | None = None, model: str | None = None, *,
                  temperature: Optional[float] = 0.7) -> HTTPProvider:
    """The configured endpoint, checked before any work: a model name, a key where the endpoint
    needs one (Anthropic; OpenAI's own API), numbers where numbers are expected."""
    name = provider_name(provider)
    model = model or os.environ.get("AUTOKERNEL_LLM_MODEL")
    if not model:
        raise ConfigError("no LLM model named", hint="pass --llm-model NAME or set AUTOKERNEL_LLM_MODEL")
    if temperature is not None and not 0.0 <= temperature <= 2.0:
        raise ConfigError(f"--temperature must be between 0 and 2, not {temperature:g}")
    common = dict(timeout_s=_env_number("AUTOKERNEL_LLM_TIMEOUT_S", 300.0),
                  retries=_env_number("AUTOKERNEL_LLM_RETRIES", 3, int),
                  backoff_s=_env_number("AUTOKERNEL_LLM_BACKOFF_S", 2.0),
                  max_tokens=_env_number("AUTOKERNEL_LLM_MAX_TOKENS", MAX_TOKENS_CAP, int), temperature=temperature)
    if common["timeout_s"] <= 0 or common["retries"] < 0 or common["max_tokens"] < 256:
        raise ConfigError("AUTOKERNEL_LLM_TIMEOUT_S must be > 0, AUTOKERNEL_LLM_RETRIES >= 0 and "
                          "AUTOKERNEL_LLM_MAX_TOKENS >= 256")
    if name == "openai":
        url = os.environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_URL
        if url.rstrip("/") == OPENAI_DEFAULT_URL and not os.environ.get("OPENAI_API_KEY"):
            raise ConfigError("OPENAI_API_KEY is not set", hint="export it, or point OPENAI_BASE_URL at a local server")
        return OpenAIProvider(model, base_url=url, **common)
    if not os.environ.get("ANTHROPIC_API_KEY"):
        raise ConfigError("ANTHROPIC_API_KEY is not set", hint="export it, or use --provider openai")
    return AnthropicProvider(model, base_url=os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com",
                             **common)

