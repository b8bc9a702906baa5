"""Safe by default: no network, few capabilities, no privilege gain, bounded pids and memory."""

from __future__ import annotations

import subprocess
import time

import anyio
import pytest

from sandgym.envs.sandbox import SandboxConfig

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


async def test_no_network_by_default(sandbox):
    curl = await sandbox.exec("curl -sS -m 5 http://deb.debian.org/debian/", timeout=20)
    assert curl.exit_code != 0
    apt = await sandbox.exec("apt-get update", timeout=60)
    assert apt.exit_code != 0 or "Err:" in apt.output or "Failed" in apt.output
    links = await sandbox.exec("cat /proc/net/dev | tail -n +3 | cut -d: -f1")
    assert [name.strip() for name in links.output.split()] == ["lo"]


async def test_network_when_asked(provider, sandbox_image):
    async with provider.sandbox(sandbox_image, SandboxConfig(network=True)) as sb:
        links = await sb.exec("cat /proc/net/dev | tail -n +3 | cut -d: -f1")
        assert "eth0" in links.output


async def test_capabilities_dropped_and_no_new_privileges(sandbox):
    status = await sandbox.exec("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status")
    fields = dict(line.split(":\t") for line in status.output.strip().splitlines())
    assert fields["NoNewPrivs"].strip() == "1"
    effective = int(fields["CapEff"], 16)
    cap_net_raw, cap_mknod, cap_sys_admin = 13, 27, 21
    for cap in (cap_net_raw, cap_mknod, cap_sys_admin):
        assert not effective & (1 << cap), f"capability {cap} is still effective"
    mknod = await sandbox.exec("mknod /tmp/dev c 1 3")
    assert mknod.exit_code != 0
    mount = await sandbox.exec("mkdir -p /mnt/x && mount -t tmpfs none /mnt/x")
    assert mount.exit_code != 0
    # root can still do ordinary root things: own files, switch users
    chown = await sandbox.exec("touch /tmp/f && chown nobody /tmp/f && su -s /bin/sh nobody -c 'id -u'")
    assert chown.exit_code == 0 and chown.output.strip().endswith("65534")


async def test_fork_bomb_is_contained_and_host_stays_responsive(provider, sandbox_image, mode):
    config = SandboxConfig(pids_limit=128, exec_server=(mode == "runner"))
    async with provider.sandbox(sandbox_image, config) as sb:
        host_latencies: list[float] = []

        async def probe_host():
            for _ in range(6):
                start = time.monotonic()
                await anyio.to_thread.run_sync(lambda: subprocess.run(["true"], check=True))
                host_latencies.append(time.monotonic() - start)
                await anyio.sleep(0.5)

        async with anyio.create_task_group() as tg:
            tg.start_soon(probe_host)
            bomb = await sb.exec("bomb() { bomb | bomb & }; bomb; sleep 30", timeout=5)
        assert bomb.timed_out
        assert max(host_latencies) < 1.0, f"host spawn latencies {host_latencies}"
        # the bomb is gone and the sandbox still answers
        await anyio.sleep(0.5)
        count = await sb.exec("ps -e --no-headers | wc -l", timeout=20)
        assert count.exit_code == 0
        assert int(count.output.strip()) < 20, count.output


async def test_memory_hog_is_oom_killed_and_reported(provider, sandbox_image, mode):
    config = SandboxConfig(memory="256m", exec_server=(mode == "runner"))
    async with provider.sandbox(sandbox_image, config) as sb:
        hog = await sb.exec("python3 -c \"s = 'x' * (1024 << 20); print(len(s))\"", timeout=60)
        assert hog.exit_code == 137, hog
        assert hog.oom_killed
        assert not hog.timed_out
        fine = await sb.exec("python3 -c \"s = 'x' * (16 << 20); print(len(s))\"")
        assert fine.ok and not fine.oom_killed


async def test_eight_sandboxes_at_once(provider, sandbox_image):
    results: dict[int, str] = {}
    names: set[str] = set()

    async def one(i: int):
        async with provider.sandbox(sandbox_image) as sb:
            names.add(sb.name)
            await sb.write_file("/tmp/id", str(i))
            out = await sb.exec("sleep 0.5; cat /tmp/id; ls /tmp")
            results[i] = out.output

    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(one, i)
    assert len(names) == 8
    # each saw only its own file
    assert all(results[i] == f"{i}id\n" for i in range(8)), results
    assert time.monotonic() - start < 30
