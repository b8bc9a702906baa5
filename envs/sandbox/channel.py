"""Host side of the in-container runner: requests out over the container's
attached stdin, answers back over its multiplexed stdout.

A daemon thread drains the attach socket all the time (an undrained pipe is
how parallel starts hang) and resolves the awaiting asyncio futures through
``call_soon_threadsafe``, so waiting for an answer costs no worker thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import socket
import threading
from typing import Any, Callable, Iterator

import anyio

from ..errors import SandboxDied

__all__ = ["RunnerChannel", "iter_frames", "close_attached", "raw_socket"]

log = logging.getLogger(__name__)

_NOPYTHON = b"SANDGYM-NOPYTHON"
_BIG_SEND = 256 * 1024  # larger requests are sent from a worker thread


def raw_socket(attached: Any) -> Any:
    """The object with sendall/recv behind what docker-py's attach_socket returns."""
    return getattr(attached, "_sock", attached)


def iter_frames(sock: Any, idle: Callable[[], None] | None = None) -> Iterator[tuple[int, bytes]]:
    """(stream, payload) frames of Docker's multiplexed attach/exec stream until EOF.

    stream is 1 for stdout and 2 for stderr (0, stdin, never comes back).
    With ``idle``, the socket's timeout is a heartbeat: ``idle()`` runs each
    time it passes with no data, and reading goes on.
    """
    buf = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            if idle is None:
                raise
            idle()
            continue
        if not chunk:
            return
        buf += chunk
        while len(buf) >= 8:
            size = int.from_bytes(buf[4:8], "big")
            if len(buf) < 8 + size:
                break
            stream, payload = buf[0], bytes(buf[8 : 8 + size])
            del buf[: 8 + size]
            yield stream, payload


def close_attached(attached: Any) -> None:
    """Shut down and close a socket from attach_socket/exec_start (wrapper first, then socket)."""
    sock = raw_socket(attached)
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except (OSError, AttributeError):
        pass
    for closer in (attached.close, sock.close):
        try:
            closer()
        except OSError:
            pass


class RunnerChannel:
    def __init__(self, attached: Any, name: str) -> None:
        self.name = name
        self._attached = attached
        self._sock = raw_socket(attached)
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._stdout = bytearray()
        self._stderr_tail = bytearray()
        self._hello: dict | None = None
        self._hello_seen = threading.Event()
        self._dead: str | None = None
        self._thread = threading.Thread(target=self._read_loop, name=f"sandgym-channel-{name}", daemon=True)
        self._thread.start()

    # --- lifecycle ---------------------------------------------------------

    def wait_hello(self, timeout: float) -> dict | None:
        """Block until the runner greets us. None when the image has no Python
        (the container then runs a plain sleep and commands go through docker exec)."""
        if not self._hello_seen.wait(timeout):
            raise SandboxDied(f"{self.name}: the exec runner did not start within {timeout:.0f}s")
        if self._hello is None and self._dead is not None:
            raise SandboxDied(f"{self.name}: the exec runner died at start: {self._dead}")
        return self._hello if self._hello and not self._hello.get("nopython") else None

    @property
    def alive(self) -> bool:
        return self._dead is None

    def close(self) -> None:
        close_attached(self._attached)

    # --- requests ------------------------------------------------------------

    async def request(self, op: str, *, wait: float | None, **fields: Any) -> dict:
        """Send one request and wait for its answer; ``wait`` bounds the wait on the host."""
        if self._dead is not None:
            raise SandboxDied(f"{self.name}: the exec runner is gone: {self._dead}")
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        with self._lock:
            self._pending[rid] = (loop, future)
        line = json.dumps({"id": rid, "op": op, **fields}, separators=(",", ":")).encode() + b"\n"
        try:
            if len(line) > _BIG_SEND:
                await anyio.to_thread.run_sync(self._send, line)
            else:
                self._send(line)
            with anyio.fail_after(wait):
                return await future
        except TimeoutError as exc:
            raise SandboxDied(f"{self.name}: the exec runner did not answer '{op}' within {wait:.0f}s") from exc
        except anyio.get_cancelled_exc_class():
            if op == "exec" and self._dead is None:
                self._send_quietly({"id": 0, "op": "cancel", "target": rid})
            raise
        finally:
            with self._lock:
                self._pending.pop(rid, None)

    def send_raw(self, data: bytes) -> None:
        """Write bytes to the container's stdin as they are (the runner's source at boot)."""
        self._send(data)

    def _send(self, data: bytes) -> None:
        try:
            with self._send_lock:
                self._sock.sendall(data)
        except OSError as exc:
            raise SandboxDied(f"{self.name}: cannot write to the exec runner: {exc}") from exc

    def _send_quietly(self, msg: dict) -> None:
        try:
            self._send(json.dumps(msg).encode() + b"\n")
        except SandboxDied:
            pass

    # --- reading ---------------------------------------------------------------

    def _read_loop(self) -> None:
        reason = "the container closed its output"
        try:
            for stream, payload in iter_frames(self._sock):
                if stream == 1:
                    self._on_stdout(payload)
                else:
                    self._on_stderr(payload)
        except OSError as exc:
            reason = f"connection lost: {exc}"
        finally:
            tail = self._stderr_tail.decode(errors="replace").strip().splitlines()
            self._dead = reason + (f" (last runner message: {tail[-1]})" if tail else "")
            self._hello_seen.set()
            self._fail_pending()

    def _on_stdout(self, payload: bytes) -> None:
        self._stdout += payload
        while True:
            end = self._stdout.find(b"\n")
            if end < 0:
                return
            line = bytes(self._stdout[:end])
            del self._stdout[: end + 1]
            self._on_line(line)

    def _on_stderr(self, payload: bytes) -> None:
        self._stderr_tail = (self._stderr_tail + payload)[-4096:]
        log.debug("%s runner stderr: %s", self.name, payload.decode(errors="replace").rstrip())

    def _on_line(self, line: bytes) -> None:
        if line.strip() == _NOPYTHON:
            self._hello = {"nopython": True}
            self._hello_seen.set()
            return
        try:
            msg = json.loads(line)
        except ValueError:
            log.warning("%s: unexpected runner output: %r", self.name, line[:200])
            return
        if "hello" in msg:
            self._hello = msg
            self._hello_seen.set()
            return
        with self._lock:
            entry = self._pending.get(msg.get("id"))
        if entry is not None:
            loop, future = entry
            loop.call_soon_threadsafe(_resolve, future, msg)

    def _fail_pending(self) -> None:
        with self._lock:
            pending = list(self._pending.values())
        for loop, future in pending:
            error = SandboxDied(f"{self.name}: the exec runner is gone: {self._dead}")
            try:
                loop.call_soon_threadsafe(_reject, future, error)
            except RuntimeError:  # that loop is closed
                pass


def _resolve(future: asyncio.Future, msg: dict) -> None:
    if not future.done():
        future.set_result(msg)


def _reject(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
