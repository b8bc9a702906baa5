"""QEMU on the host: which binaries exist, and whether KVM really works.

``/dev/kvm`` existing proves nothing (on some hosts it is there and QEMU
aborts with "failed to set MSR" or the guest hangs). The probe boots a
512-byte boot sector that writes to QEMU's ``isa-debug-exit`` port, with the
same ``-cpu host`` a real run would use; only a clean exit through that port
counts as working. Anything else means: use TCG.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

__all__ = ["AccelProbe", "probe_accel", "best_accel", "QEMU_USER", "QEMU_SYSTEM"]

QEMU_SYSTEM = "qemu-system-x86_64"
QEMU_USER = ("qemu-aarch64-static", "qemu-riscv64-static", "qemu-loongarch64-static")

# mov al, 0x31 ; out 0xf4, al ; hlt ; jmp $-1   -> QEMU exits with (0x31 << 1) | 1
_BOOT_CODE = bytes([0xB0, 0x31, 0xE6, 0xF4, 0xF4, 0xEB, 0xFD])
_EXPECTED_EXIT = (0x31 << 1) | 1


class AccelProbe(BaseModel):
    accel: str
    usable: bool
    seconds: float
    detail: str


def _boot_sector() -> bytes:
    return _BOOT_CODE + bytes(510 - len(_BOOT_CODE)) + b"\x55\xaa"


def probe_accel(accel: str = "kvm", *, cpu: str | None = None, timeout: float = 20.0) -> AccelProbe:
    """Boot the probe sector under ``accel`` (``kvm`` uses ``-cpu host``) and report what happened."""
    qemu = shutil.which(QEMU_SYSTEM)
    if qemu is None:
        return AccelProbe(accel=accel, usable=False, seconds=0.0, detail=f"{QEMU_SYSTEM} not installed")
    if accel == "kvm" and not Path("/dev/kvm").exists():
        return AccelProbe(accel=accel, usable=False, seconds=0.0, detail="/dev/kvm does not exist")
    cpu = cpu or ("host" if accel == "kvm" else "qemu64")
    with tempfile.TemporaryDirectory(prefix="sandgym-kvm-") as tmp:
        image = Path(tmp) / "probe.img"
        image.write_bytes(_boot_sector())
        cmd = [
            qemu, "-accel", accel, "-cpu", cpu, "-m", "16", "-display", "none", "-serial", "none",
            "-monitor", "none", "-no-reboot", "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
            "-drive", f"file={image},format=raw,if=ide",
        ]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return AccelProbe(
                accel=accel, usable=False, seconds=timeout, detail=f"the probe guest hung for {timeout:.0f}s"
            )
        seconds = time.monotonic() - start
    if proc.returncode == _EXPECTED_EXIT:
        return AccelProbe(accel=accel, usable=True, seconds=seconds, detail=f"probe guest booted in {seconds:.2f}s")
    lines = [line for line in (proc.stderr or "").splitlines() if line.strip()]
    reason = lines[-1].strip() if lines else f"exit status {proc.returncode}"
    return AccelProbe(accel=accel, usable=False, seconds=seconds, detail=reason[:200])


def best_accel() -> tuple[str, list[str]]:
    """``("kvm", ["-accel", "kvm", "-cpu", "host"])`` where KVM works, else TCG's arguments."""
    if probe_accel("kvm").usable:
        return "kvm", ["-accel", "kvm", "-cpu", "host"]
    return "tcg", ["-accel", "tcg"]
