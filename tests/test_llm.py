"""The LLM proposer against a real HTTP server on 127.0.0.1 (tests/support/llm_server.py) that speaks
the OpenAI chat-completions and the Anthropic messages protocols, replays scripted replies and
misbehaves the way real endpoints do. Each numbered bug of issue 21 has its reproduction here."""

from __future__ import annotations

import json
import signal
import threading

import pytest

from autokernel.errors import ConfigError, LLMError, ProposerError
from autokernel.proposers import LLMSettings
from autokernel.proposers.answers import read_answer
from autokernel.proposers.llm import LLMProposer, answer_budget
from autokernel.proposers.providers import CallFailed, make_provider
from autokernel.store import Store

from support.llm_server import ScriptedLLM
from test_loop import TINY_REDUCE, add_tiny_kernel, check_invariants

OPENAI_KEY = "sk-test-openai-7c1f0e"
ANTHROPIC_KEY = "sk-ant-test-93ab1d"
GOOD = TINY_REDUCE.replace("DELAY_MS = 300", "DELAY_MS = 0")
BROKEN = TINY_REDUCE.replace('VARIANT = "loop"', 'VARIANT = "off_by_one"')
PRICES = json.dumps({"kernel-llm-1": [2.0, 8.0]})  # USD per million input / output tokens
COST = (1200 * 2.0 + 345 * 8.0) / 1e6  # one OpenAI reply of the stand-in server


@pytest.fixture
def server():
    srv = ScriptedLLM().start()
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
    monkeypatch.delenv("AUTOKERNEL_LLM_PRICES", raising=False)
    monkeypatch.delenv("AUTOKERNEL_LLM_MAX_TOKENS", raising=False)
    return server


def reply(code: str, desc: str = "drop the delay") -> str:
    return f"DESCRIPTION: {desc}\n\nHere is the file:\n```python\n{code}```\nDone."


def final(code: str, desc: str = "drop the delay", decoy: str | None = None) -> str:
    old = f"The old version, for reference:\n```python\n{decoy}```\n\n" if decoy else ""
    return f"DESCRIPTION: {desc}\n\n{old}The new file:\n```python\n# FINAL kernel.py\n{code}```\n"


def sr(old: str, new: str, desc: str = "an edit") -> str:
    return f"DESCRIPTION: {desc}\n\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n"


def secrets_absent(home) -> bool:
    data = home.db.read_bytes() + b"".join(p.read_bytes() for p in home.home.rglob("*") if p.is_file())
    return OPENAI_KEY.encode() not in data and ANTHROPIC_KEY.encode() not in data


def reduce_spec():
    from autokernel.kernels import get_spec

    return get_spec("reduce")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_scripted_replies_are_recorded(home, llm_env, provider):
    server = llm_env
    store = Store(home.db)
    run = store.create_run("loop", model="tiny", agent="llm")
    proposer = LLMProposer(store=store, run_id=run.id, provider=provider, model="kernel-llm-1")
    spec = reduce_spec()
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
    assert calls[0].finish_reason == ("stop" if provider == "openai" else "end_turn")
    prompt, text = store.llm_call_texts(calls[1])
    assert "rules of the game" in prompt.lower() and "bigger block size" in text
    assert calls[3].prompt_gz is not None and calls[3].reply_gz is None  # a call that got no reply

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
    assert secrets_absent(home)


def test_malformed_retry_after_is_ignored_and_the_call_retried(home, llm_env):
    """Bug 1: `Retry-After: soon` crashed the loop with a ValueError and left no llm_calls row. A
    header that cannot be read is ignored (the backoff decides); dates and retry-after-ms work."""
    server = llm_env
    with Store(home.db) as store:
        run = store.create_run("loop", model="tiny", agent="llm")
        proposer = LLMProposer(store=store, run_id=run.id, provider="openai", model="kernel-llm-1")
        server.script = [{"status": 429, "headers": {"retry-after": "soon"}},
                         {"status": 503, "headers": {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}},
                         {"text": reply(GOOD)},
                         {"status": 429, "headers": {"retry-after-ms": "20", "retry-after": "-"}},
                         {"text": reply(GOOD)}]
        assert "DELAY_MS = 0" in proposer.propose(TINY_REDUCE, reduce_spec()).source
        assert "DELAY_MS = 0" in proposer.propose(TINY_REDUCE, reduce_spec()).source
        assert [(c.status, c.attempts) for c in store.list_llm_calls(run.id)] == [("ok", 3), ("ok", 2)]


def test_endpoint_parameter_refusals_are_fixed_once_and_fatal_ones_stop(home, llm_env):
    """Bug 3: a 400 for a parameter the model does not take is fixed and asked again (max_tokens ->
    max_completion_tokens, temperature dropped, max_tokens lowered to the model's limit); a 403 is
    fatal at once: one request, a fatal LLMError (exit code 15), no retries."""
    server = llm_env
    with Store(home.db) as store:
        run = store.create_run("loop", model="tiny", agent="llm")
        proposer = LLMProposer(store=store, run_id=run.id, provider="openai", model="kernel-llm-1")
        server.script = [
            {"status": 400, "body": {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with "
                                               "this model. Use 'max_completion_tokens' instead.",
                                               "type": "invalid_request_error", "param": "max_tokens"}}},
            {"status": 400, "body": {"error": {"message": "Unsupported value: 'temperature' does not support 0.7 "
                                               "with this model. Only the default (1) value is supported."}}},
            {"status": 400, "body": {"error": {"message": "max_completion_tokens is too large: 4096. This model "
                                               "supports at most 2048 completion tokens, whereas you provided 4096."}}},
            {"text": reply(GOOD)},
            {"text": reply(GOOD.replace("BLOCK = 256", "BLOCK = 512"))},
            {"status": 403, "body": {"error": {"message": "Project does not have access to model kernel-llm-1"}}},
            {"text": reply(GOOD)},
        ]
        proposer.propose(TINY_REDUCE, reduce_spec())
        bodies = [r["body"] for r in server.requests]
        assert "max_tokens" in bodies[0] and "max_completion_tokens" in bodies[1] and "temperature" in bodies[1]
        assert "temperature" not in bodies[2] and bodies[3]["max_completion_tokens"] == 2048
        assert "BLOCK = 512" in proposer.propose(TINY_REDUCE, reduce_spec()).source
        assert len(server.requests) == 5  # the fixes hold for the session
        assert "temperature" not in bodies[-1] and server.requests[4]["body"]["max_completion_tokens"] == 2048
        with pytest.raises(LLMError) as exc:
            proposer.propose(TINY_REDUCE, reduce_spec())
        assert exc.value.fatal and exc.value.exit_code == 15 and "403" in exc.value.one_line()
        assert len(server.requests) == 6
        calls = store.list_llm_calls(run.id)
        assert [(c.status, c.http_status, c.attempts) for c in calls] == [("ok", 200, 1), ("ok", 200, 1),
                                                                           ("fatal", 403, 1)]
        assert (calls[0].max_tokens, calls[0].temperature) == (2048, None)


def test_a_rejected_key_stops_the_run_at_once_with_exit_15_and_no_key_anywhere(home, llm_env, run_cli):
    """Bugs 3 and 4: a 401 was retried per kernel until "every kernel exhausted" (exit 0), and its
    body, which echoes the key, was stored and printed verbatim."""
    server = llm_env
    store, _, k = add_tiny_kernel(home)
    store.close()
    server.script = [{"status": 401, "body": {"error": {"message": f"Incorrect API key provided: {OPENAI_KEY}. "
                                                                   "You can find your API key at https://example."}}}]
    code, out, err = run_cli("loop", "--model", "tiny", "--agent", "llm", "--llm-model", "kernel-llm-1",
                             "--provider", "openai", "--no-verify", "--max-experiments", "3", "--timeout", "120",
                             "--json")
    assert code == 15, (out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "HTTP 401" in lines[0] and "OPENAI_API_KEY" in lines[0]
    assert "[REDACTED:OPENAI_API_KEY]" in lines[0] and OPENAI_KEY not in out + err
    assert len(server.requests) == 1  # at once: no retry, no second kernel, no second call
    with Store(home.db) as store:
        run = store.list_runs()[-1]
        assert run.status == "failed"
        assert [e.status for e in store.list_experiments(run_id=run.id)] == ["baseline"]
        (call,) = store.list_llm_calls(run.id)
        assert (call.status, call.http_status, call.kernel_id) == ("fatal", 401, k.id)
        assert "[REDACTED:OPENAI_API_KEY]" in call.error
    assert secrets_absent(home)


def test_the_answer_budget_follows_the_file_and_a_cut_answer_is_recorded(home, llm_env, monkeypatch):
    """Bug 5: max_tokens was fixed at 8192 and the finish reason ignored, so a cut file was logged as
    "no code". Now the budget comes from the file, the finish reason is recorded, and the next prompt
    says to answer with edits, which apply strictly."""
    server = llm_env
    big = GOOD + "".join(f"# padding {i:05d} keeps this file as large as a KernelBench GEMM start\n"
                         for i in range(420))
    assert len(big) > 30_000
    with Store(home.db) as store:
        run = store.create_run("loop", model="tiny", agent="llm")
        proposer = LLMProposer(store=store, run_id=run.id, provider="openai", model="kernel-llm-1")
        server.script = [{"text": "DESCRIPTION: the whole file\n```python\n# FINAL kernel.py\n" + big[:6000],
                          "finish": "length"},
                         {"text": sr("BLOCK = 256\n", "BLOCK = 512\n", "bigger block")},
                         {"text": sr("BLOCK = 1024\n", "BLOCK = 512\n", "a block that is not there")}]
        with pytest.raises(ProposerError, match="cut off"):
            proposer.propose(big, reduce_spec())
        sent = server.requests[0]["body"]["max_tokens"]
        assert sent == answer_budget(big, 32000) and 12_000 < sent < 32_000
        p = proposer.propose(big, reduce_spec())
        assert "BLOCK = 512" in p.source and p.source.count("# padding") == 420 and p.description == "bigger block"
        second = server.requests[1]["body"]["messages"][1]["content"]
        assert "Your last answer could not be used (truncated)" in second and "cut off" in second
        with pytest.raises(ProposerError, match="is not in the current kernel.py"):
            proposer.propose(big, reduce_spec())
        calls = store.list_llm_calls(run.id)
        assert [(c.status, c.finish_reason) for c in calls] == [("truncated", "length"), ("ok", "stop"),
                                                                ("edit_failed", "stop")]
    monkeypatch.setenv("AUTOKERNEL_LLM_MAX_TOKENS", "8192")
    small = LLMProposer(provider="openai", model="kernel-llm-1")
    server.script = [{"text": "no code"}]
    with pytest.raises(ProposerError):
        small.propose(big, reduce_spec())
    last = server.requests[-1]["body"]
    assert last["max_tokens"] == 8192 and "the whole file would not fit: answer with edits" in \
        last["messages"][1]["content"]


def test_an_answer_is_the_block_the_rules_ask_for():
    """Bug 6: with two code blocks the longest won, so an "old version for reference" was committed."""
    longer_old = TINY_REDUCE + "# the old version is longer\n" * 20
    answer = read_answer(final(GOOD, decoy=longer_old), TINY_REDUCE)
    assert "DELAY_MS = 0" in answer.source and "FINAL" not in answer.source and answer.form == "file"
    with pytest.raises(ProposerError) as exc:
        read_answer(reply(longer_old) + reply(GOOD), TINY_REDUCE)
    assert exc.value.status == "ambiguous"
    assert "DELAY_MS = 0" in read_answer(reply(GOOD), TINY_REDUCE).source  # one block: nothing to choose
    diff = ("```diff\n--- a/kernel.py\n+++ b/kernel.py\n@@ -12,3 +12,3 @@\n BLOCK = 256\n-DELAY_MS = 300\n"
            "+DELAY_MS = 0\n VARIANT = \"loop\"\n```\n")
    assert read_answer("DESCRIPTION: no delay\n" + diff, TINY_REDUCE).source == GOOD
    with pytest.raises(ProposerError) as exc:
        read_answer(diff.replace("DELAY_MS = 300", "DELAY_MS = 30"), TINY_REDUCE)
    assert exc.value.status == "edit_failed" and "hunk 1 does not apply" in str(exc.value)
    with pytest.raises(ProposerError) as exc:
        read_answer(sr("BLOCK = 256\n", "BLOCK = 256\n"), TINY_REDUCE)
    assert exc.value.status == "unchanged"


def test_ctrl_c_during_a_call_leaves_its_row(home, llm_env):
    """Bug 11: Ctrl-C while waiting on the endpoint left no llm_calls row for the call."""
    server = llm_env
    main = threading.main_thread().ident
    with Store(home.db) as store:
        run = store.create_run("loop", model="tiny", agent="llm")
        proposer = LLMProposer(store=store, run_id=run.id, provider="anthropic", model="kernel-llm-1")
        server.script = [{"then": lambda request: signal.pthread_kill(main, signal.SIGINT), "sleep": 1.0,
                          "text": reply(GOOD)}]
        with pytest.raises(KeyboardInterrupt):
            proposer.propose(TINY_REDUCE, reduce_spec())
        (call,) = store.list_llm_calls(run.id)
        assert (call.status, call.attempts) == ("interrupted", 1) and call.latency_s > 0
        assert "sum" in store.llm_call_texts(call)[0]


def test_configuration_errors_come_before_any_work(home, llm_env, monkeypatch):
    """Bug 9: a missing model name exited 4 only after profile and extract (leaving the run row
    "running" under a dead pid), a missing Anthropic key only after the baselines."""
    from autokernel.kb.runner import kb_run
    from autokernel.loop import run_loop
    from autokernel.workspace import Workspace

    server = llm_env
    monkeypatch.delenv("AUTOKERNEL_LLM_MODEL", raising=False)
    with Store(home.db) as store:
        ws = Workspace.open(home)
        never = dict(model="a-model-never-profiled", agent="llm", verify=False)
        with pytest.raises(ConfigError, match="no LLM model"):
            run_loop(store, ws, provider="openai", **never)
        with pytest.raises(ConfigError, match="--max-cost needs the price of kernel-llm-1"):
            run_loop(store, ws, llm=LLMSettings(llm_model="kernel-llm-1", provider="openai", max_cost=1.0), **never)
        monkeypatch.delenv("ANTHROPIC_API_KEY")
        with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
            run_loop(store, ws, provider="anthropic", llm_model="kernel-llm-1", **never)
        with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
            kb_run(store, ws, level=1, source="sample", agent="llm", provider="anthropic", llm_model="m")
        assert store.list_runs() == [] and store.latest_profile() is None
        # a resumed run is not reopened (nor its pid taken) when its configuration is refused
        run = store.create_run("loop", model="tiny", agent="llm", pid=1, config={"provider": "anthropic",
                                                                                 "llm_model": "kernel-llm-1"})
        store.finish_run(run.id, "interrupted")
        with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
            run_loop(store, ws, resume_run_id=run.id, verify=False)
        assert (store.get_run(run.id).status, store.get_run(run.id).pid) == ("interrupted", 1)
    assert server.requests == []
    monkeypatch.setenv("AUTOKERNEL_LLM_PRICES", "{not json")
    with pytest.raises(ConfigError, match="AUTOKERNEL_LLM_PRICES is not JSON"):
        LLMProposer(provider="openai", model="kernel-llm-1")
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set"):
        make_provider("openai", "m")


def test_three_experiment_loop_records_prompts_replies_tokens_and_cost(home, llm_env, monkeypatch, run_cli):
    """The loop against the stand-in server, two candidates per request judged as one batch:
    1. a 429 with `Retry-After: soon` (bug 1), then two answers: a final file beside a longer old
       version (bug 6), kept, and a diff whose file hangs at import (bug 10: a timeout, not a crash);
    2. two answers that give no candidate (edits that do not apply, prose): recorded, fed back (bug 7);
    3. an edit whose file exits in the CPU timing step only (bug 2: a failed experiment, not exit 11).
    Every call is stored with its prompt, reply, tokens and cost; the time waited on the endpoint
    counts toward the run's time (bug 8); `report --format md` shows the calls; the candidates ran
    in a bench child whose environment held no key."""
    import torch

    from autokernel.loop import run_loop

    if torch.cuda.is_available():
        pytest.skip("the third candidate fails in the CPU timing step, which a GPU run does not have")
    server = llm_env
    monkeypatch.setenv("AUTOKERNEL_LLM_PRICES", PRICES)
    monkeypatch.setenv("AUTOKERNEL_LLM_TIMEOUT_S", "10")
    # kernel_fn refuses to work when any key is visible: a correct verdict proves the child had none
    guard = ("import os as _os\n_LEAK = [k for k in _os.environ if 'KEY' in k or k.startswith(('OPENAI', 'ANTHROPIC'))]\n"
             "assert not _LEAK, _LEAK\n")
    kept = GOOD.replace("import time\n", "import time\n" + guard, 1)
    hang = ("```diff\n--- a/kernel.py\n+++ b/kernel.py\n@@ -1,4 +1,5 @@\n \"\"\"Row sums for the loop tests.\"\"\"\n"
            " import time\n+time.sleep(3600)  # hangs at import\n \n import torch\n```\n")
    exits = sr("BLOCK = 256\n", "BLOCK = 512\nimport sys as _sys\n\nif 'autokernel.cpu_timing' in _sys.modules:  "
               "# only in the CPU timing child\n    raise SystemExit(3)\n", "bigger block")
    store, ws, k = add_tiny_kernel(home)
    server.script = [
        {"status": 429, "headers": {"retry-after": "soon"}},
        {"sleep": 0.4, "texts": [final(kept, decoy=TINY_REDUCE + "# the old one\n" * 30),
                                 "DESCRIPTION: hang on purpose\n" + hang]},
        {"sleep": 0.4, "texts": [sr("BLOCK = 1024\n", "BLOCK = 2048\n"), "Try a larger block, I think."]},
        {"sleep": 0.4, "text": exits},
    ]
    summary = run_loop(store, ws, model="tiny", hours=1, max_experiments=3, agent="llm", verify=False, timeout_s=16,
                       llm=LLMSettings(llm_model="kernel-llm-1", provider="openai", candidates=2))
    rows = check_invariants(store, ws, k, summary.run_id)
    assert [(e.proposer, e.status) for e in rows] == [("baseline", "baseline"), ("llm", "kept"), ("llm", "timeout"),
                                                      ("llm", "crashed")], [e.error for e in rows]
    assert rows[1].description == "drop the delay" and "_LEAK" in ws.read(k.name) and "old one" not in ws.read(k.name)
    assert "load: exceeded its time limit" in rows[2].error
    assert "cpu-timing" in rows[3].error and "exited with status 3" in rows[3].error
    assert summary.stop_reason == "3 experiments done" and summary.status == "finished"

    calls = store.list_llm_calls(summary.run_id)
    # the second and third requests asked for one answer: one experiment was left of the limit
    assert [(c.status, c.attempts, c.candidates) for c in calls] == [("ok", 2, 2), ("edit_failed", 1, 1),
                                                                     ("ok", 1, 1)]
    assert [e.llm_call_id for e in rows] == [None, calls[0].id, calls[0].id, calls[2].id]
    assert [c.experiment_id for c in calls] == [rows[1].id, None, rows[3].id]
    assert all(c.kernel_id == k.id and c.cost_usd == pytest.approx(COST) for c in calls)
    assert len({c.prompt_sha for c in calls}) == 3  # bug 7: no prompt went out twice
    prompts = [store.llm_call_texts(c)[0] for c in calls]
    replies = [store.llm_call_texts(c)[1] for c in calls]
    assert "===== choice 2 =====" in replies[0] and "hang on purpose" in replies[0]
    assert "The last candidate failed (#3, timeout)" in prompts[1] and "+time.sleep(3600)" in prompts[1]
    assert "Your last answer could not be used (edit_failed)" in prompts[2] and "BLOCK = 1024" in prompts[2]
    assert "choice 2: the answer holds neither edits nor a python block" in calls[1].error
    # bug 8: the time spent waiting on the endpoint is part of the run's time
    waited = sum(c.latency_s for c in calls)
    assert waited >= 1.2
    assert summary.elapsed_s == pytest.approx(sum(e.duration_s for e in rows) + waited, rel=1e-6)
    store.close()

    code, out, _ = run_cli("report", "--run", str(summary.run_id), "--format", "md")
    assert code == 0
    section = out.split("## LLM calls", 1)[1]
    assert f"| {summary.run_id} | **all** | openai/kernel-llm-1 | 3 | 2 | 3600 | 1035 |" in section
    assert f"| {summary.run_id} | tiny.reduce | openai/kernel-llm-1 | 3 | 2 | 3600 | 1035 |" in section
    assert f"{3 * COST:.4f}" in section
    assert secrets_absent(home)


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


def test_the_llm_budget_stops_the_run_cleanly(home, llm_env, monkeypatch):
    """--max-llm-calls and --max-cost are checked before each call from the store's rows; the run
    then finishes with the reason, and a resumed run counts the calls it made before."""
    from autokernel.loop_experiments import Loop

    server = llm_env
    monkeypatch.setenv("AUTOKERNEL_LLM_PRICES", PRICES)
    with Store(home.db) as store:
        run = store.create_run("loop", model="tiny", agent="llm")
        calls2 = LLMProposer(store=store, run_id=run.id, provider="openai", model="kernel-llm-1", max_llm_calls=2)
        server.script = [{"text": "no code"}, {"text": reply(GOOD)}]
        with pytest.raises(ProposerError):
            calls2.propose(TINY_REDUCE, reduce_spec())
        calls2.propose(TINY_REDUCE, reduce_spec())
        with pytest.raises(ProposerError, match=r"LLM call limit is reached \(2 of --max-llm-calls 2\)"):
            calls2.propose(TINY_REDUCE, reduce_spec())
        dearer = LLMProposer(store=store, run_id=run.id, provider="openai", model="kernel-llm-1",
                             max_cost=2 * COST - 1e-9)
        with pytest.raises(ProposerError, match="LLM cost limit is reached"):
            dearer.propose(TINY_REDUCE, reduce_spec())
        assert len(server.requests) == 2 and store.llm_usage(run.id)[:2] == (2, pytest.approx(2 * COST))
        # in the loop: a stop reason, not a failure
        _, ws, k = add_tiny_kernel(home, model="tiny2")
        loop = Loop(store, ws, run=run, kernels=[k], agent="llm", proposer=calls2, judge=None, budget_s=3600,
                     max_experiments=None, timeout_s=60, on_event=None)
        assert loop.run_budget() == "the LLM call limit is reached (2 of --max-llm-calls 2)"
        assert loop.llm_budget_spent and len(server.requests) == 2


def test_anthropic_candidates_are_separate_requests_and_a_missing_usage_is_estimated(home, llm_env, monkeypatch):
    """Anthropic's protocol has no `n`: n candidates are n requests, each its own row; a reply without
    token counts is charged an estimate (four characters a token), so --max-cost still holds."""
    server = llm_env
    monkeypatch.setenv("AUTOKERNEL_LLM_PRICES", json.dumps({"*": [3.0, 15.0]}))
    with Store(home.db) as store:
        run = store.create_run("loop", model="tiny", agent="llm")
        proposer = LLMProposer(store=store, run_id=run.id, provider="anthropic", model="claude-x", candidates=2)
        server.script = [{"text": reply(GOOD)}, {"text": reply(BROKEN, "wrong"), "usage": False}]
        got = proposer.propose(TINY_REDUCE, reduce_spec())
        assert [p.description for p in got] == ["drop the delay", "wrong"]
        assert [("n" in r["body"], r["body"]["max_tokens"]) for r in server.requests] == [(False, 4096)] * 2
        first, second = store.list_llm_calls(run.id)
        assert [p.llm_call_id for p in got] == [first.id, second.id]
        assert first.cost_usd == pytest.approx((1100 * 3.0 + 300 * 15.0) / 1e6)
        prompt, text = store.llm_call_texts(second)
        assert second.prompt_tokens is None and second.cost_usd == pytest.approx(
            (len(prompt) / 4 * 3.0 + len(text) / 4 * 15.0) / 1e6)


def test_only_configured_secrets_are_redacted():
    from autokernel.redact import redact

    env = {"OPENAI_API_KEY": OPENAI_KEY, "TOKENIZERS_PARALLELISM": "false", "MY_SERVICE_TOKEN": "tok-0123456789abcdef",
           "HF_HOME": "/data/hf/cache/with/a/long/path", "ANTHROPIC_API_KEY": "x"}
    text = f"key {OPENAI_KEY}, parallel false, tok-0123456789abcdef, /data/hf/cache/with/a/long/path, x"
    assert redact(text, env) == ("key [REDACTED:OPENAI_API_KEY], parallel false, [REDACTED:MY_SERVICE_TOKEN], "
                                 "/data/hf/cache/with/a/long/path, x")
