"""The LLM proposer against a real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions
and the Anthropic messages protocols and replays scripted replies."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from autokernel.errors import ProposerError
from autokernel.proposers.llm import LLMProposer, build_prompt, extract_code
from autokernel.proposers.providers import CallFailed, make_provider
from autokernel.store import Store

from test_loop import SHAPES, TINY_REDUCE, add_tiny_kernel, check_invariants

OPENAI_KEY = "sk-test-openai-7c1f0e"
ANTHROPIC_KEY = "sk-ant-test-93ab1d"
GOOD = TINY_REDUCE.replace("DELAY_MS = 300", "DELAY_MS = 0")
BROKEN = TINY_REDUCE.replace('VARIANT = "loop"', 'VARIANT = "off_by_one"')


class Scripted(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.script: list[dict] = []  # each: {"text"} | {"status", "headers"} | {"sleep"}
        self.requests: list[dict] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        step = self.server.script.pop(0)
        if "sleep" in step:
            time.sleep(step["sleep"])
        status = step.get("status", 200)
        if status != 200:
            payload = b'{"error": "busy"}'
        elif self.path.endswith("/chat/completions"):
            payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": step["text"]}}],
                                  "usage": {"prompt_tokens": 1200, "completion_tokens": 345}}).encode()
        else:
            payload = json.dumps({"content": [{"type": "text", "text": step["text"]}],
                                  "usage": {"input_tokens": 1100, "output_tokens": 300}}).encode()
        try:
            self.send_response(status)
            for k, v in step.get("headers", {}).items():
                self.send_header(k, v)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout case)


@pytest.fixture
def server():
    srv = Scripted()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()


@pytest.fixture
def llm_env(monkeypatch, server):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("AUTOKERNEL_LLM_BACKOFF_S", "0.05")
    monkeypatch.setenv("AUTOKERNEL_LLM_RETRIES", "2")
    monkeypatch.setenv("AUTOKERNEL_LLM_TIMEOUT_S", "1.5")
    return server


def reply(code: str, desc: str = "drop the delay") -> str:
    return f"DESCRIPTION: {desc}\n\nHere is the file:\n```python\n{code}```\nDone."


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_scripted_replies_are_recorded(home, llm_env, provider):
    server = llm_env
    store = Store(home.db)
    run = store.create_run("loop", model="tiny", agent="llm")
    proposer = LLMProposer(store=store, run_id=run.id, provider=provider, model="kernel-llm-1")
    from autokernel.kernels import get_spec

    spec = get_spec("reduce")
    server.script = [
        {"text": reply(GOOD)},                                   # a good kernel
        {"text": "I would try a bigger block size; it should be faster."},  # prose, no code
        {"text": reply("def kernel_fn(x):\n    return x +\n")},  # not Python
        {"sleep": 3.0, "text": reply(GOOD)}, {"sleep": 3.0, "text": reply(GOOD)},
        {"sleep": 3.0, "text": reply(GOOD)},                     # the timeout, each retry too
        {"status": 429, "headers": {"retry-after": "0"}},         # 429, then success
        {"text": reply(BROKEN, "wrong on purpose")},
    ]
    good = proposer.propose(TINY_REDUCE, spec, [], None)
    assert "DELAY_MS = 0" in good.source and good.description == "drop the delay"
    assert good.config == {"BLOCK": 256, "DELAY_MS": 0, "VARIANT": "loop"}
    for _ in range(2):
        with pytest.raises(ProposerError):
            proposer.propose(TINY_REDUCE, spec, [], None)
    with pytest.raises(CallFailed) as exc:
        proposer.propose(TINY_REDUCE, spec, [], None)
    assert exc.value.status == "timeout" and exc.value.attempts == 3
    broken = proposer.propose(TINY_REDUCE, spec, [], None)
    assert 'VARIANT = "off_by_one"' in broken.source

    calls = store.list_llm_calls(run.id)
    assert [(c.status, c.attempts) for c in calls] == [("ok", 1), ("no_code", 1), ("syntax_error", 1),
                                                       ("timeout", 3), ("ok", 2)]
    assert all(c.provider == provider and c.model == "kernel-llm-1" for c in calls)
    tokens = (1200, 345) if provider == "openai" else (1100, 300)
    assert (calls[0].prompt_tokens, calls[0].completion_tokens) == tokens
    assert calls[4].http_status == 200 and calls[0].latency_s > 0
    assert calls[0].id == good.llm_call_id

    # the protocol each endpoint expects, the key only in its header
    first = server.requests[0]
    if provider == "openai":
        assert first["path"] == "/v1/chat/completions"
        assert first["headers"]["authorization"] == f"Bearer {OPENAI_KEY}"
        assert [m["role"] for m in first["body"]["messages"]] == ["system", "user"]
    else:
        assert first["path"] == "/v1/messages"
        assert first["headers"]["x-api-key"] == ANTHROPIC_KEY
        assert first["headers"]["anthropic-version"] == "2023-06-01"
        assert "rules of the game" in first["body"]["system"].lower()
    user = json.dumps(first["body"])
    assert "KERNEL_TYPE" in user and "sum" in user  # the current file and the reference went out
    store.close()
    data = home.db.read_bytes() + b"".join(p.read_bytes() for p in home.home.rglob("*") if p.is_file())
    assert OPENAI_KEY.encode() not in data and ANTHROPIC_KEY.encode() not in data


def test_provider_selection_and_errors(monkeypatch):
    from autokernel.errors import ConfigError

    monkeypatch.delenv("AUTOKERNEL_LLM_MODEL", raising=False)
    monkeypatch.delenv("AUTOKERNEL_LLM_PROVIDER", raising=False)
    with pytest.raises(ConfigError):
        make_provider("openai", None)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    assert make_provider(None, "m").name == "anthropic"
    with pytest.raises(ConfigError):
        make_provider("gemini", "m")
    assert extract_code("no code here") is None
    two = "```python\nA = 1\n```\n```python\nB = 2\ndef kernel_fn(x):\n    return x\n```"
    assert extract_code(two).startswith("B = 2")


def test_llm_loop_judges_in_a_keyless_bench(home, llm_env):
    """The loop with the llm agent: a good kernel is kept, a broken one judged incorrect, prose
    recorded and skipped; the candidates run in a bench child whose environment has no keys."""
    from autokernel.loop import run_loop

    server = llm_env
    # kernel_fn refuses to work when any key is visible: a correct verdict proves the child had none
    guard = ("import os as _os\n_LEAK = [k for k in _os.environ if 'KEY' in k or k.startswith(('OPENAI', 'ANTHROPIC'))]\n"
             "assert not _LEAK, _LEAK\n")
    good = GOOD.replace("import time\n", "import time\n" + guard, 1)
    store, ws, k = add_tiny_kernel(home)
    server.script = [{"text": reply(good)}, {"text": "Sorry, I cannot help with that."},
                     {"text": reply(BROKEN, "wrong on purpose")}]
    summary = run_loop(store, ws, model="tiny", hours=1, max_experiments=2, agent="llm", llm_model="kernel-llm-1",
                       provider="openai", verify=False, timeout_s=120)
    rows = check_invariants(store, ws, k, summary.run_id)
    assert [(e.proposer, e.status) for e in rows] == [("baseline", "baseline"), ("llm", "kept"), ("llm", "incorrect")]
    assert rows[1].description == "drop the delay" and "_LEAK" in ws.read(k.name)
    calls = store.list_llm_calls(summary.run_id)
    assert [c.status for c in calls] == ["ok", "no_code", "ok"]
    assert [c.experiment_id for c in calls] == [rows[1].id, None, rows[2].id]


def test_llm_kernel_that_only_the_interpreter_runs_is_not_kept(home, llm_env):
    """Without a GPU the loop's bench also compiles an LLM's kernel for sm_90: one whose loop rebinds
    a name to a block of another shape is correct under the interpreter but a compile error."""
    import torch

    from autokernel.loop import run_loop

    if torch.cuda.is_available():
        pytest.skip("with a GPU the kernel is compiled for real")
    server = llm_env
    rebinding = GOOD.replace("    acc = tl.zeros([BLOCK], dtype=tl.float32)\n",
                             "    acc = tl.zeros([BLOCK], dtype=tl.float32)\n    offs = tl.arange(0, 2 * BLOCK)\n", 1)
    assert rebinding != GOOD
    store, ws, k = add_tiny_kernel(home)
    server.script = [{"text": reply(rebinding, "drop the delay")}]
    summary = run_loop(store, ws, model="tiny", hours=1, max_experiments=1, agent="llm", llm_model="kernel-llm-1",
                       provider="openai", verify=False, timeout_s=120)
    rows = check_invariants(store, ws, k, summary.run_id)
    assert [(e.proposer, e.status) for e in rows] == [("baseline", "baseline"), ("llm", "crashed")]
    assert "gpu-compile" in rows[1].error and "Loop-carried variable offs" in rows[1].error
