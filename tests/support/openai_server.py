"""A scripted OpenAI-compatible chat-completions server over real HTTP, for agent tests.

    with ScriptedServer([tool_reply("bash", {"command": "ls"}), error(429, retry_after=1)]) as server:
        agent = LLMAgent(base_url=server.base_url, ...)

Each request to ``POST /v1/chat/completions`` consumes the next script entry (a dict;
the helpers below build them):

    tool_reply(name, arguments)  a tool call; arguments a dict, or a raw string sent as is
    text_reply(text)             an assistant message with text and no tool call
    error(status, retry_after=, body=)  an HTTP error (429, 500, 401...), optionally with Retry-After
    malformed()                  200 with a body that is not JSON
    no_choices()                 200 with valid JSON but no ``choices``
    truncated()                  200 declaring a Content-Length larger than what is sent, then closed
    slow(seconds, entry)         ``entry`` after a pause (the client may have given up by then)

Any entry may carry ``usage=(prompt_tokens, completion_tokens)``. Every request is
recorded (path, headers, JSON body) in ``server.requests``. When the script runs out
the server answers 400 "script exhausted", so the agent fails loudly.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Sequence
from typing import Any

__all__ = [
    "ScriptedServer",
    "Recorded",
    "tool_reply",
    "text_reply",
    "error",
    "malformed",
    "no_choices",
    "truncated",
    "slow",
]


def tool_reply(
    name: str | None, arguments: dict[str, Any] | str | None = None, *, id: str | None = "auto",
    content: str | None = None, usage: tuple[int, int] = (10, 5), finish_reason: str = "tool_calls",
    also: Sequence[tuple[str, dict[str, Any]]] = (),
) -> dict[str, Any]:
    """A reply with a tool call; ``arguments`` a dict (JSON-encoded) or a raw string sent verbatim.

    ``also``: further (name, arguments) calls in the same reply (parallel tool calls).
    """
    return {"kind": "tool", "name": name, "arguments": {} if arguments is None else arguments, "id": id,
            "content": content, "usage": usage, "finish_reason": finish_reason, "also": list(also)}


def text_reply(text: str, *, usage: tuple[int, int] = (10, 5)) -> dict[str, Any]:
    return {"kind": "text", "content": text, "usage": usage}


def error(status: int, *, retry_after: float | str | None = None, body: Any = None) -> dict[str, Any]:
    return {"kind": "error", "status": status, "retry_after": retry_after, "body": body}


def malformed() -> dict[str, Any]:
    return {"kind": "malformed"}


def no_choices() -> dict[str, Any]:
    return {"kind": "no_choices"}


def truncated() -> dict[str, Any]:
    return {"kind": "truncated"}


def slow(seconds: float, entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "delay": seconds}


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes = b""
    entry: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body["messages"]


class ScriptedServer:
    """An HTTP server on 127.0.0.1 (a free port) answering from ``script``, one entry per request."""

    def __init__(self, script: list[dict[str, Any]]):
        self.script = list(script)
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._calls = 0

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "the server is not running"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self.script)

    def __enter__(self) -> ScriptedServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # wakes slow entries
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def _next(self, record: Recorded) -> dict[str, Any] | None:
        with self._lock:
            self.requests.append(record)
            entry = self.script.pop(0) if self.script else None
            record.entry = entry
            self._calls += 1
            return entry

    def _call_id(self) -> str:
        with self._lock:
            return f"call_{self._calls:04d}"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeout tests) breaks the pipe; nothing to report


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        record = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw)
        entry = self.owner._next(record)
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        if entry is None:
            return self._send(400, {"error": {"message": "script exhausted"}})
        if entry.get("delay") and self.owner._stop.wait(entry["delay"]):
            return  # the server is closing
        kind = entry["kind"]
        if kind == "error":
            headers = {"Retry-After": str(entry["retry_after"])} if entry["retry_after"] is not None else {}
            payload = entry["body"]
            if payload is None:
                payload = {"error": {"message": f"scripted {entry['status']}"}}
            return self._send(entry["status"], payload, headers)
        if kind == "malformed":
            return self._send_raw(200, b'{"id": "x", "choices": [{"message": ')
        if kind == "no_choices":
            return self._send(200, {"id": "x", "object": "chat.completion"})
        if kind == "truncated":
            whole = json.dumps(_completion({"role": "assistant", "content": "cut"}, "stop", (1, 1))).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(whole)))
            self.end_headers()
            self.wfile.write(whole[: len(whole) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if kind == "text":
            message = {"role": "assistant", "content": entry["content"]}
            return self._send(200, _completion(message, "stop", entry["usage"]))
        arguments = entry["arguments"]
        call_id = self.owner._call_id() if entry["id"] == "auto" else entry["id"]
        function = {"arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}
        if entry["name"] is not None:
            function["name"] = entry["name"]
        call: dict[str, Any] = {"type": "function", "function": function}
        if call_id is not None:
            call["id"] = call_id
        calls = [call] + [
            {"id": f"{call_id}_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(entry["also"], 1)
        ]
        message = {"role": "assistant", "content": entry["content"], "tool_calls": calls}
        return self._send(200, _completion(message, entry["finish_reason"], entry["usage"]))

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), headers)

    def _send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True


def _completion(message: dict[str, Any], finish_reason: str, usage: tuple[int, int]) -> dict[str, Any]:
    prompt, completion = usage
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }
