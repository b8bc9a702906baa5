"""Running commands: results as values, timeouts that kill whole trees, capped output."""

from __future__ import annotations

import os
import time

import anyio
import psutil
import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


async def test_exit_code_and_interleaved_output(sandbox):
    result = await sandbox.exec("echo out; echo err >&2; exit 7")
    assert result.exit_code == 7
    assert not result.ok
    assert result.output == "out\nerr\n"
    assert not result.timed_out and not result.truncated


async def test_cwd_env_user_stdin(sandbox):
    result = await sandbox.exec("pwd; echo $FOO; id -un", cwd="/tmp", env={"FOO": "bar baz"}, user="nobody")
    assert result.output.split("\n")[:3] == ["/tmp", "bar baz", "nobody"]
    piped = await sandbox.exec("tr a-z A-Z", stdin="hello\n")
    assert piped.output == "HELLO\n"
    binary = await sandbox.exec("wc -c", stdin=bytes(range(256)) * 4)
    assert binary.output.strip() == "1024"


async def test_default_env_disables_pagers(sandbox):
    result = await sandbox.exec("echo $PAGER $GIT_PAGER $DEBIAN_FRONTEND")
    assert result.output.strip() == "cat cat noninteractive"


async def test_timeout_kills_the_whole_tree(sandbox):
    # A child in the background, a grandchild in its own session (setsid), and a foreground sleep.
    cmd = "sleep 300 & setsid sleep 301 & (sleep 302; echo never) ; echo never"
    start = time.monotonic()
    result = await sandbox.exec(cmd, timeout=2)
    elapsed = time.monotonic() - start
    assert result.timed_out
    assert result.exit_code == 124
    assert "never" not in result.output
    assert elapsed < 2 + 2, f"timeout took {elapsed:.1f}s"
    await anyio.sleep(0.3)
    left = await sandbox.exec("ps -eo args | grep -E '^sleep 30[012]' || true")
    assert left.output.strip() == "", f"processes survived the timeout:\n{left.output}"
    # the sandbox is still usable afterwards
    assert (await sandbox.exec("echo alive")).output == "alive\n"


async def test_command_that_ignores_sigterm_is_still_killed(sandbox):
    result = await sandbox.exec("trap '' TERM; while true; do sleep 0.1; done", timeout=1)
    assert result.timed_out
    assert result.duration < 1 + 2


async def test_background_process_does_not_hang_exec(sandbox):
    # The background writer keeps the output pipe open after the command returns.
    start = time.monotonic()
    result = await sandbox.exec("(while true; do echo tick; sleep 0.2; done) & echo started", timeout=20)
    assert time.monotonic() - start < 10
    assert result.exit_code == 0
    assert "started" in result.output
    await sandbox.exec("pkill -f 'echo tick' || true")


async def test_ansi_escapes_are_stripped(sandbox):
    result = await sandbox.exec(r"printf '\033[1;31mred\033[0m \033]0;title\007plain\n'")
    assert result.output == "red plain\n"


async def test_output_is_capped_head_and_tail(sandbox):
    cmd = "seq 1 200000"
    result = await sandbox.exec(cmd, output_limit=1000)
    assert result.truncated
    assert result.total_bytes == len("".join(f"{i}\n" for i in range(1, 200001)))
    assert result.output.startswith("1\n2\n3\n")
    assert result.output.rstrip().endswith("199999\n200000")
    assert "bytes of output omitted" in result.output
    assert len(result.output) < 1200


async def test_100mb_of_output_does_not_grow_the_host(sandbox):
    proc = psutil.Process(os.getpid())
    await sandbox.exec("head -c 1000000 /dev/urandom | base64")  # warm up buffers and pools
    before = proc.memory_info().rss
    result = await sandbox.exec("head -c 100000000 /dev/zero | tr '\\0' x", timeout=120)
    grown = proc.memory_info().rss - before
    assert result.exit_code == 0
    assert result.total_bytes == 100_000_000
    assert result.truncated and len(result.output) < 40_000
    assert grown < 8 * 1024 * 1024, f"host process grew by {grown / 1e6:.1f} MB"


async def test_commands_run_concurrently_in_one_sandbox(sandbox):
    start = time.monotonic()
    results = [None] * 4

    async def run(i):
        results[i] = await sandbox.exec(f"sleep 1; echo {i}")

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(run, i)
    assert [r.output for r in results] == [f"{i}\n" for i in range(4)]
    assert time.monotonic() - start < 3.5


async def test_missing_cwd_is_a_failed_command_not_an_exception(sandbox):
    result = await sandbox.exec("true", cwd="/no/such/dir")
    assert result.exit_code != 0
    assert "/no/such/dir" in result.output


async def test_timeout_kills_orphaned_daemons(sandbox):
    # A double fork whose middle process exits at once: the daemon is re-parented
    # to init and in its own session, so only its inherited environment ties it to us.
    cmd = "(setsid sh -c 'sleep 303' &) ; sleep 60"
    result = await sandbox.exec(cmd, timeout=1.5)
    assert result.timed_out
    await anyio.sleep(0.3)
    left = await sandbox.exec("ps -eo args | grep -E '^sleep 303' || true")
    assert left.output.strip() == "", f"daemon survived the timeout:\n{left.output}"
