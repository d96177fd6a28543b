"""Keys, configs and processes of the lab's sshd instances (one per host, inside its namespace)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from deploy.lab.model import Lab, LabError, LabHost

SSHD = "/usr/sbin/sshd"  # sshd re-executes itself and insists on an absolute path
PRIVSEP_DIR = "/run/sshd"  # its unprivileged child chroots here; Debian creates it only at boot


def write_keypair(private_path: str, comment: str) -> str:
    """An ed25519 key pair in OpenSSH format; returns the public key line."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode()
    # 0600 from the first byte: sshd and ssh refuse private keys others can read.
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(private)
    os.chmod(private_path, 0o600)
    Path(f"{private_path}.pub").write_text(f"{public} {comment}\n", encoding="utf-8")
    return public


def public_key(private_path: str) -> str:
    """``type base64`` of a key written by write_keypair."""
    return " ".join(Path(f"{private_path}.pub").read_text(encoding="utf-8").split()[:2])


def write_sshd_config(lab: Lab, host: LabHost) -> None:
    lines = [
        "# Written by bisect's lab: one sshd per test host, inside its network namespace.",
        f"ListenAddress {host.address}:22",
        f"HostKey {host.host_key}",
        f"PidFile {host.pid_file}",
        f"AuthorizedKeysFile {lab.directory}/authorized_keys",
        "UsePAM no",
        "StrictModes no",  # the lab lives in a temporary directory with whatever modes it has
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "AllowTcpForwarding yes",  # ProxyJump through a lab host needs direct-tcpip channels
        "X11Forwarding no",
        "PrintMotd no",
        "MaxSessions 100",  # one connection per node carries every concurrent command
        "MaxStartups 100",
        "Subsystem sftp internal-sftp",
    ]
    Path(host.sshd_config).write_text("\n".join(lines) + "\n", encoding="utf-8")


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def is_ours(pid: int | None, start: int | None) -> bool:
    """The pid is still the process we started (pids get reused)."""
    return pid is not None and start is not None and start_time(pid) == start


def start_sshd(lab: Lab, host: LabHost, timeout_s: float = 10.0) -> LabHost:
    """Start the host's sshd in its namespace; returns the host with the daemon's pid recorded."""
    os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
    Path(host.pid_file).unlink(missing_ok=True)
    # sshd daemonizes (its parent exits at once), so it outlives whoever ran `lab up`; it writes
    # its pid file only after its listening socket is bound: the file appearing means ready.
    argv = ["ip", "netns", "exec", host.namespace, SSHD, "-f", host.sshd_config,
            "-E", host.sshd_log]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise LabError(f"sshd of {host.name} did not start: {done.stderr.strip() or _log(host)}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = Path(host.pid_file).read_text() if Path(host.pid_file).exists() else ""
        if text.strip().isdigit():
            pid = int(text)
            return replace(host, sshd_pid=pid, sshd_start=start_time(pid))
        time.sleep(0.01)
    raise LabError(f"sshd of {host.name} did not come up within {timeout_s:g}s: {_log(host)}")


def _log(host: LabHost) -> str:
    try:
        return Path(host.sshd_log).read_text(errors="replace").strip()[-500:] or "(empty log)"
    except OSError:
        return "(no log)"


def sshd_pids_in(namespace_pids: Iterable[int]) -> list[int]:
    """The sshd processes among these: the listener and the per-connection ones."""
    found = []
    for pid in namespace_pids:
        try:
            if os.readlink(f"/proc/{pid}/exe") == SSHD:
                found.append(pid)
        except OSError:
            continue
    return found


def terminate(pids: Iterable[int], grace_s: float = 3.0) -> None:
    """TERM, then KILL what is still alive after the grace period; returns once all are dead.

    A killed process may linger as a zombie until its parent (this machine's init) reaps it:
    dead is dead for us, and it holds no socket or namespace any more."""
    targets = {pid: start_time(pid) for pid in pids}
    targets = {pid: start for pid, start in targets.items() if start is not None}

    def alive() -> list[int]:
        for pid in targets:
            with contextlib.suppress(ChildProcessError):  # reap it if it is our own child
                os.waitpid(pid, os.WNOHANG)
        return [pid for pid, start in targets.items() if start_time(pid) == start]

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not alive():
            return
    raise LabError(f"processes {alive()} survived SIGKILL")
