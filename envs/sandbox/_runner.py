"""The exec runner: a long-lived process inside each container that runs commands.

``docker exec`` costs ~56-75 ms per call; this runner, fed JSON requests over
the container's attached stdin and answering on stdout, costs a few ms. The
host sends this file (after ``_capture.py``) as the first line on stdin, to a
three-line loader run by ``python3 -c``; so it must be standard library only
and run on Python >= 3.9.

Protocol, one JSON object per line each way:

- host -> runner: ``{"id": N, "op": "exec"|"read"|"write"|"ping", ...}``
- runner -> host: ``{"id": N, "ok": true, ...}`` or ``{"id": N, "ok": false, "error": "..."}``;
  the first line the runner prints is ``{"hello": "sandgym-runner", ...}``.

Each command runs in its own session (``setsid``), so a timeout kills its
whole process tree, including children that re-parented or changed group.
When stdin reaches EOF (the controlling process died or detached) or the
lifetime runs out, the runner kills every command and exits, and the
container ends with it.
"""

import base64
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time

try:  # importable as a module for tooling; inside the container HeadTail is prepended
    from ._capture import HeadTail
except ImportError:  # pragma: no cover - the in-container path
    pass

PROTOCOL = 1
_write_lock = threading.Lock()
_live = {}  # request id -> (Popen, marker) of running commands
_live_lock = threading.Lock()
_OUT = sys.stdout.buffer


def send(msg):
    line = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
    with _write_lock:
        _OUT.write(line)
        _OUT.flush()


# --- process-tree handling -------------------------------------------------


def _proc_table():
    """pid -> (ppid, pgid, sid) for every live (non-zombie) process in the container."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        # state ppid pgrp session ...
        if fields[0] in (b"Z", b"X"):
            continue  # already dead, waiting to be reaped
        table[int(name)] = (int(fields[1]), int(fields[2]), int(fields[3]))
    return table


def _marked(table, marker):
    """Processes whose environment carries ``SANDGYM_EXEC=marker`` (it survives setsid and re-parenting)."""
    needle = ("SANDGYM_EXEC=%s" % marker).encode()
    found = set()
    for pid in table:
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.add(pid)
        except OSError:
            continue
    return found


def _tree(root, marker=None):
    """Every process descended from ``root``, sharing its group or session, or carrying its marker."""
    table = _proc_table()
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = {pid for pid, (_, pgid, sid) in table.items() if pgid == root or sid == root}
    if marker is not None:
        found |= _marked(table, marker)
    stack = [root] + list(found)
    while stack:
        pid = stack.pop()
        if pid in table:
            found.add(pid)
        for child in children.get(pid, ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    found.discard(os.getpid())
    found.discard(1)
    return found


def _signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def kill_tree(root, marker=None):
    """Stop, then kill, the whole tree of ``root`` until nothing of it is left."""
    for _ in range(200):
        victims = _tree(root, marker)
        if not victims:
            return
        _signal_all(victims, signal.SIGSTOP)  # freeze forks while we look again
        victims |= _tree(root, marker)
        try:
            os.killpg(root, signal.SIGKILL)
        except OSError:
            pass
        _signal_all(victims, signal.SIGKILL)
        time.sleep(0.005)


# --- cgroup OOM accounting -------------------------------------------------

_OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def oom_kills():
    """How many processes the container's memory cgroup has OOM-killed, or None."""
    for path in _OOM_FILES:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


# --- operations -------------------------------------------------------------

_SHELL = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"


def op_exec(req):
    env = dict(os.environ)
    env.update(req.get("env") or {})
    marker = "%d-%s" % (os.getpid(), req["id"])
    env["SANDGYM_EXEC"] = marker
    stdin_data = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
    timeout = req.get("timeout")
    capture = HeadTail(int(req.get("limit", 32000)))
    kwargs = {}
    if req.get("user"):
        try:
            kwargs = _identity(req["user"], env)
        except (KeyError, ValueError) as exc:
            return _failed("unknown user %r: %s" % (req["user"], exc))
    oom_before = oom_kills()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [_SHELL, "-c", req["cmd"]],
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=req.get("cwd") or None,
            env=env,
            start_new_session=True,
            **kwargs
        )
    except (OSError, KeyError, ValueError) as exc:  # bad cwd, unusable shell ...
        return _failed(str(exc))
    with _live_lock:
        _live[req["id"]] = (proc, marker)
    if stdin_data is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin_data), daemon=True).start()
    timed_out = _pump(proc, capture, None if timeout is None else start + float(timeout))
    if timed_out:
        kill_tree(proc.pid, marker)
    code = proc.wait()
    with _live_lock:
        _live.pop(req["id"], None)
    if timed_out:  # catch anything that forked while the leader was dying
        kill_tree(proc.pid, marker)
    oom_after = oom_kills()
    if code < 0:
        code = 128 - code  # killed by a signal: report it as a shell would
    return {
        "exit_code": 124 if timed_out else code,
        "output": base64.b64encode(capture.render()).decode(),
        "truncated": capture.truncated,
        "total_bytes": capture.total,
        "timed_out": timed_out,
        "oom_killed": bool(oom_before is not None and oom_after is not None and oom_after > oom_before),
        "duration": time.monotonic() - start,
    }


def _identity(user, env):
    """Popen arguments to run as ``user`` (a name, uid, or uid:gid), and its HOME/USER."""
    import pwd

    name, _, group = str(user).partition(":")
    entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    gid = int(group) if group else entry.pw_gid
    env["HOME"], env["USER"], env["LOGNAME"] = entry.pw_dir, entry.pw_name, entry.pw_name
    return {"user": entry.pw_uid, "group": gid, "extra_groups": []}


def _failed(message):
    """The answer for a command that could not even start (exit 127, like a shell)."""
    return {"exit_code": 127, "output": base64.b64encode(message.encode()).decode(),
            "truncated": False, "timed_out": False, "oom_killed": False,
            "duration": 0.0, "total_bytes": len(message)}


def _feed(pipe, data):
    try:
        pipe.write(data)
    except OSError:
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


_LINGER = 0.2  # seconds to keep reading after the command exits (background writers)


def _pump(proc, capture, deadline):
    """Read the command's output until EOF; True if the deadline passed first."""
    fd = proc.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    exited_at = None
    try:
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return True
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > _LINGER:
                return False  # a background process holds the pipe; stop listening
            wait = 0.05
            if deadline is not None:
                wait = min(wait, deadline - now)
            if not sel.select(max(wait, 0)):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return False
            capture.feed(chunk)
    finally:
        sel.close()
        proc.stdout.close()


def op_read(req):
    with open(req["path"], "rb") as f:
        data = f.read()
    return {"data": base64.b64encode(data).decode()}


def op_write(req):
    path = req["path"]
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    tmp = "%s.sandgym-%d" % (path, req["id"])
    with open(tmp, "wb") as f:
        f.write(base64.b64decode(req["data"]))
    if req.get("mode") is not None:
        os.chmod(tmp, int(req["mode"]))
    os.replace(tmp, path)
    return {"size": os.path.getsize(path)}


def op_ping(req):
    return {"pid": os.getpid(), "oom_kills": oom_kills()}


def op_cancel(req):
    """Kill a running command whose caller gave up waiting for it."""
    with _live_lock:
        entry = _live.get(req["target"])
    if entry is not None:
        kill_tree(entry[0].pid, entry[1])
    return {"cancelled": entry is not None}


OPS = {"exec": op_exec, "read": op_read, "write": op_write, "ping": op_ping, "cancel": op_cancel}


def handle(req):
    rid = req.get("id")
    try:
        result = OPS[req["op"]](req)
        result.update({"id": rid, "ok": True})
    except Exception as exc:  # every failure goes back as a value
        result = {"id": rid, "ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    send(result)


def shutdown(code):
    with _live_lock:
        entries = list(_live.values())
    for proc, marker in entries:
        kill_tree(proc.pid, marker)
    os._exit(code)


def main():
    lifetime = float(sys.argv[1]) if len(sys.argv) > 1 else 7200.0
    timer = threading.Timer(lifetime, shutdown, args=(0,))
    timer.daemon = True
    timer.start()
    send({"hello": "sandgym-runner", "protocol": PROTOCOL, "pid": os.getpid(),
          "python": sys.version.split()[0], "oom_kills": oom_kills()})
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            shutdown(0)  # the controller is gone: take everything down with us
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError as exc:
            send({"id": None, "ok": False, "error": "bad request: %s" % exc})
            continue
        threading.Thread(target=handle, args=(req,), daemon=True).start()


if __name__ == "__main__":
    main()
