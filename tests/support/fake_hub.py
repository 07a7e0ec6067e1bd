"""A small Hugging Face Hub on 127.0.0.1 for push tests: it speaks the part of the Hub's HTTP API that
huggingface_hub uses to create a repository, create a branch and commit files, and keeps the files
it received so a test can compare them with the local export."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeHub:
    def __init__(self):
        self.repos: dict[str, dict] = {}  # repo_id -> {"type":..., "branches": {name: {path: bytes}}}
        self.requests: list[tuple[str, str]] = []
        self.unknown: list[tuple[str, str]] = []
        self.auth_headers: list[str] = []
        self.validated_yaml: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def do_GET(self):
                hub.requests.append(("GET", self.path))
                m = re.match(r"^/api/(\w+)s/([^/]+/[^/]+)(?:/revision/([^/?]+))?", self.path)
                if m and m.group(2) in hub.repos:
                    repo = hub.repos[m.group(2)]
                    rev = m.group(3) or "main"
                    files = repo["branches"].get(rev, {})
                    return self._send(200, {"id": m.group(2), "sha": hashlib.sha1(repr(sorted(files)).encode()).hexdigest(),
                                            "siblings": [{"rfilename": p} for p in files], "private": False})
                hub.unknown.append(("GET", self.path))
                self._send(404, {"error": "not found"})

            def do_POST(self):
                hub.requests.append(("POST", self.path))
                hub.auth_headers.append(self.headers.get("Authorization", ""))
                body = self._body()
                if self.path == "/api/repos/create":
                    payload = json.loads(body)
                    repo_id = f"{payload['organization']}/{payload['name']}"
                    hub.repos.setdefault(repo_id, {"type": payload.get("type"), "branches": {"main": {}}})
                    return self._send(200, {"url": f"http://{self.headers['Host']}/{payload.get('type', 'model')}s/{repo_id}",
                                            "name": repo_id})
                if self.path == "/api/validate-yaml":  # the README's front matter is checked before a commit
                    hub.validated_yaml.append(json.loads(body).get("content", ""))
                    return self._send(200, {"errors": [], "warnings": []})
                m = re.match(r"^/api/(\w+)s/([^/]+/[^/]+)/(preupload|commit|branch)/([^?]+)", self.path)
                if not m or m.group(2) not in hub.repos:
                    hub.unknown.append(("POST", self.path))
                    return self._send(404, {"error": f"unknown {self.path}"})
                repo, action, rev = hub.repos[m.group(2)], m.group(3), m.group(4)
                if action == "preupload":
                    files = json.loads(body).get("files", [])
                    return self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                                       "oid": None} for f in files], "commitOid": "0" * 40})
                if action == "branch":
                    repo["branches"].setdefault(rev, dict(repo["branches"]["main"]))
                    return self._send(200, {})
                files = repo["branches"].setdefault(rev, {})
                for line in body.decode().splitlines():
                    if not line.strip():
                        continue
                    item = json.loads(line)
                    if item.get("key") == "file":
                        v = item["value"]
                        files[v["path"]] = base64.b64decode(v["content"]) if v.get("encoding") == "base64" else v["content"].encode()
                    elif item.get("key") == "deletedFile":
                        files.pop(item["value"]["path"], None)
                oid = hashlib.sha1(repr(sorted(files)).encode()).hexdigest()
                return self._send(200, {"commitUrl": f"http://{self.headers['Host']}/{m.group(2)}/commit/{oid}",
                                        "commitOid": oid, "success": True})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
