"""A child process that writes run records, so the harness's event loop never waits on the disk.

Fed on stdin with frames ``>II`` (path length, data length), path, data; each
record is written to a temporary name and renamed into place. A frame cut
short (the parent died mid-write) is dropped, so a record on disk is always
whole. Standard library only, fast to start.
"""

import os
import signal
import struct
import sys


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; we drain and exit on EOF
    stream = sys.stdin.buffer
    failures = 0
    while True:
        header = stream.read(8)
        if len(header) < 8:
            return 1 if failures else 0
        path_len, data_len = struct.unpack(">II", header)
        path = stream.read(path_len).decode()
        data = stream.read(data_len)
        if len(data) < data_len:
            return 1 if failures else 0  # the parent died mid-record: keep the old file
        tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            failures += 1
            sys.stderr.write(f"cannot write {path}: {exc}\n")
            sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
