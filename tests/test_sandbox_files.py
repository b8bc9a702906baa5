"""Files in and out of a sandbox, byte-exact, in both exec modes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


async def test_one_megabyte_of_random_bytes_round_trips(sandbox):
    data = os.urandom(1 << 20)
    await sandbox.write_file("/tmp/deep/er/blob.bin", data)
    assert await sandbox.read_file("/tmp/deep/er/blob.bin") == data
    digest = await sandbox.exec("sha256sum /tmp/deep/er/blob.bin | cut -d' ' -f1")
    import hashlib

    assert digest.output.strip() == hashlib.sha256(data).hexdigest()


async def test_text_and_mode(sandbox):
    await sandbox.write_file("/tmp/run.sh", "#!/bin/sh\necho héllo\n", mode=0o755)
    result = await sandbox.exec("/tmp/run.sh")
    assert result.output == "héllo\n"
    overwritten = b"\x00\xff\n" * 3
    await sandbox.write_file("/tmp/run.sh", overwritten)
    assert await sandbox.read_file("/tmp/run.sh") == overwritten


async def test_reading_a_missing_file_raises_file_not_found(sandbox):
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("/no/such/file")


def _make_tree(root: Path) -> dict[str, bytes]:
    files = {
        "a.txt": b"alpha\n",
        "sub/b.bin": os.urandom(70_000),
        "sub/deeper/c.py": b"print('c')\n",
        "empty": b"",
        "spaced name.txt": b"spaces survive\n",
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "sub" / "deeper" / "c.py").chmod(0o755)
    (root / "emptydir").mkdir()
    return files


async def test_upload_and_download_a_tree(sandbox, tmp_path):
    src = tmp_path / "src"
    files = _make_tree(src)
    await sandbox.upload(src, "/work/project")
    listing = await sandbox.exec("cd /work/project && find . -type f | sort && test -d emptydir && echo dir-ok")
    assert sorted(listing.output.splitlines()[:-1]) == sorted(f"./{rel}" for rel in files)
    assert listing.output.splitlines()[-1] == "dir-ok"
    assert (await sandbox.exec("test -x /work/project/sub/deeper/c.py")).exit_code == 0

    await sandbox.exec("echo changed >> /work/project/a.txt && mkdir -p /work/project/new && echo n > /work/project/new/n")
    dst = tmp_path / "dst"
    await sandbox.download("/work/project", dst)
    assert (dst / "a.txt").read_bytes() == b"alpha\nchanged\n"
    assert (dst / "sub" / "b.bin").read_bytes() == files["sub/b.bin"]
    assert (dst / "new" / "n").read_bytes() == b"n\n"
    assert (dst / "spaced name.txt").read_bytes() == b"spaces survive\n"
    assert os.access(dst / "sub" / "deeper" / "c.py", os.X_OK)


async def test_download_a_single_file_and_missing_paths(sandbox, tmp_path):
    await sandbox.write_file("/tmp/single.txt", b"one\n")
    await sandbox.download("/tmp/single.txt", tmp_path / "out")
    assert (tmp_path / "out" / "single.txt").read_bytes() == b"one\n"
    with pytest.raises(FileNotFoundError):
        await sandbox.download("/no/such/dir", tmp_path / "nothing")
    with pytest.raises(NotADirectoryError):
        await sandbox.upload(tmp_path / "missing", "/tmp/x")
