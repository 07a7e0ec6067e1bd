"""A chat endpoint on 127.0.0.1 that speaks the OpenAI chat-completions and the Anthropic messages
protocols and replays a script of steps, misbehaving the way real endpoints do.

Each step is a dict:
  {"text": "..."}                      a 200 reply (OpenAI: one choice per entry of "texts" when given)
  {"texts": ["...", "..."]}            a 200 reply with several choices (OpenAI's n)
  {"finish": "length"}                 the finish / stop reason of the reply (default stop / end_turn)
  {"status": 429, "headers": {...}}    an error status, with headers (Retry-After...)
  {"body": {...}}                      the error body (default {"error": {"message": "busy"}})
  {"sleep": 2.0}                       wait before answering (a slow model, a timeout)
  {"usage": False}                     leave the token counts out
  {"then": callable}                   called with the request before answering (e.g. to send Ctrl-C)
Every request is kept in `requests` (path, headers, body).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPENAI_USAGE = {"prompt_tokens": 1200, "completion_tokens": 345}
ANTHROPIC_USAGE = {"input_tokens": 1100, "output_tokens": 300}


class ScriptedLLM(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[dict] = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> "ScriptedLLM":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


def _payload(path: str, step: dict) -> bytes:
    texts = step.get("texts") or [step.get("text", "")]
    if path.endswith("/chat/completions"):
        data = {"choices": [{"index": i, "message": {"role": "assistant", "content": t},
                             "finish_reason": step.get("finish", "stop")} for i, t in enumerate(texts)]}
        if step.get("usage", True):
            data["usage"] = OPENAI_USAGE
    else:
        data = {"content": [{"type": "text", "text": texts[0]}], "stop_reason": step.get("finish", "end_turn")}
        if step.get("usage", True):
            data["usage"] = ANTHROPIC_USAGE
    return json.dumps(data).encode()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        request = {"path": self.path, "headers": dict(self.headers), "body": body}
        with self.server.lock:
            self.server.requests.append(request)
            step = self.server.script.pop(0) if self.server.script else {"status": 500,
                                                                         "body": {"error": "script exhausted"}}
        if "then" in step:
            step["then"](request)
        if "sleep" in step:
            time.sleep(step["sleep"])
        status = step.get("status", 200)
        payload = (_payload(self.path, step) if status == 200
                   else json.dumps(step.get("body", {"error": {"message": "busy"}})).encode())
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
