"""The SSH transport: commands on a remote node over one reused paramiko connection.

``run(argv)`` sends ``shlex.join(argv)``: the remote login shell sees every value quoted, so no
value is ever interpreted by it (a POSIX login shell: sh, dash, bash, ksh, zsh; fish and csh
quote otherwise). Host keys are checked against a known_hosts file like OpenSSH does (unknown:
refused unless the node accepts new keys; changed: always refused). Every failure is a
``TransportError`` whose message names the node and the cause, never a paramiko traceback.
"""

from __future__ import annotations

import logging
import os
import select
import shlex
import socket
import threading
import time
from collections.abc import Sequence

import paramiko

from deploy.transports.base import CommandResult, TransportError, refuse_unsendable
from deploy.transports.ssh_config import Hop, Route, SSHTarget, resolve

# paramiko logs its own tracebacks from its reader thread; we report every failure ourselves.
_paramiko_log = logging.getLogger("paramiko")
if _paramiko_log.level == logging.NOTSET:
    _paramiko_log.setLevel(logging.CRITICAL)

RECONNECT_BACKOFF_S = (0.2, 0.5, 1.0, 2.0)  # after a drop: the node may be restarting sshd
_EOF_GRACE_S = 2.0  # exit status came but stdout stays open: a background child holds it
_KEEPALIVE_S = 30  # trials run for minutes between commands; keep middleboxes from forgetting us


class _Transient(TransportError):
    """Unreachable or dropped: worth another try after a pause, unlike a refused key."""


class _HostKeyRefused(paramiko.SSHException):
    pass


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown host: refuse (strict) or append it to the known_hosts file (accept_new)."""

    def __init__(self, node: str, path: str, accept_new: bool) -> None:
        self.node, self.path, self.accept_new = node, path, accept_new

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise _HostKeyRefused(
                f"{self.node}: host key of {hostname} is unknown ({key.get_name()} "
                f"{key.fingerprint}) and not in {self.path}; refused (host_key_policy: strict). "
                f"Add it to known_hosts, or set host_key_policy: accept_new to trust it once"
            )
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return "; ".join(sorted({getattr(e, "strerror", None) or str(e)
                                for e in exc.errors.values()}))
    if isinstance(exc, paramiko.ChannelException):
        return exc.text
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class SSHTransport:
    """Runs argvs on one node; thread-safe (concurrent commands share the connection)."""

    def __init__(self, target: SSHTarget, *,
                 backoff_s: Sequence[float] = RECONNECT_BACKOFF_S) -> None:
        self.target = target
        self.node = target.node
        self.backoff_s = tuple(backoff_s)
        self._clients: list[paramiko.SSHClient] = []  # jump hosts first, the node last
        self._connected_once = False
        self._lock = threading.Lock()

    # -- connection ---------------------------------------------------------------------------

    def _connect_hop(self, route: Route, hop: Hop,
                     sock: paramiko.Channel | paramiko.ProxyCommand | None,
                     via: str) -> paramiko.SSHClient:
        t = self.target
        client = paramiko.SSHClient()
        if os.path.exists(route.known_hosts):
            client.load_system_host_keys(route.known_hosts)  # read only: paramiko never rewrites it
        client.set_missing_host_key_policy(
            _KnownHostsPolicy(t.node, route.known_hosts, t.host_key_policy == "accept_new"))
        where = f"{hop.user}@{hop.hostname}:{hop.port}{via}"
        try:
            client.connect(
                hop.hostname, hop.port, username=hop.user,
                # paramiko takes a list of key files; its stubs only say str.
                key_filename=list(hop.identity_files) or None,  # type: ignore[arg-type]
                allow_agent=not hop.identities_only,
                look_for_keys=not hop.identity_files and not hop.identities_only,
                timeout=t.connect_timeout_s, banner_timeout=t.connect_timeout_s,
                auth_timeout=t.connect_timeout_s, channel_timeout=t.connect_timeout_s,
                sock=sock,
            )
        except BaseException as exc:
            client.close()
            raise self._connect_error(exc, where) from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(_KEEPALIVE_S)
        return client

    def _connect_error(self, exc: BaseException, where: str) -> BaseException:
        node = self.node
        if isinstance(exc, _HostKeyRefused):
            return TransportError(str(exc))
        if isinstance(exc, paramiko.BadHostKeyException):
            return TransportError(
                f"{node}: HOST KEY CHANGED for {where}: it offered {exc.key.get_name()} "
                f"{exc.key.fingerprint} but known_hosts has {exc.expected_key.fingerprint}; "
                f"refused (someone may be intercepting the connection, or the host was "
                f"reinstalled: then remove the old entry with ssh-keygen -R)"
            )
        if isinstance(exc, paramiko.PasswordRequiredException):
            return TransportError(f"{node}: the private key for {where} is encrypted; "
                                  f"load it into ssh-agent")
        if isinstance(exc, OSError) and exc.filename:
            return TransportError(f"{node}: cannot read key file {exc.filename}: {exc.strerror}")
        if isinstance(exc, paramiko.SSHException) and "private key" in str(exc):
            return TransportError(f"{node}: unusable key file for {where}: {exc}")
        if isinstance(exc, paramiko.AuthenticationException):
            return TransportError(f"{node}: authentication refused by {where}: {exc}")
        if isinstance(exc, TimeoutError | socket.timeout):
            return _Transient(f"{node}: cannot reach {where}: timed out after "
                              f"{self.target.connect_timeout_s:g}s")
        if isinstance(exc, socket.gaierror):
            return TransportError(f"{node}: cannot resolve {where}: {exc.strerror}")
        if isinstance(exc, OSError | EOFError | paramiko.SSHException):
            return _Transient(f"{node}: cannot reach {where}: {_describe(exc)}")
        if isinstance(exc, Exception):  # whatever else paramiko raises: still one clear line
            return TransportError(f"{node}: cannot connect to {where}: "
                                  f"{type(exc).__name__}: {exc}")
        return exc  # KeyboardInterrupt and friends pass through

    def _connect(self) -> list[paramiko.SSHClient]:
        try:
            route = resolve(self.target)
        except TransportError:
            raise
        except Exception as exc:  # e.g. a token paramiko's config parser cannot expand
            raise TransportError(f"{self.node}: cannot use the ssh config: {exc}") from None
        clients: list[paramiko.SSHClient] = []
        sock: paramiko.Channel | paramiko.ProxyCommand | None = None
        try:
            if route.proxy_command:
                sock = paramiko.ProxyCommand(route.proxy_command)
            for index, hop in enumerate(route.hops):
                via = f" via {route.hops[index - 1].label}" if index else ""
                if index:  # one hop further: a direct-tcpip channel through the previous hop
                    outer = clients[-1].get_transport()
                    assert outer is not None
                    try:
                        sock = outer.open_channel(
                            "direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0),
                            timeout=self.target.connect_timeout_s)
                    except (paramiko.SSHException, OSError, EOFError) as exc:
                        raise _Transient(
                            f"{self.node}: jump host {route.hops[index - 1].label} cannot reach "
                            f"{hop.hostname}:{hop.port}: {_describe(exc)}") from None
                clients.append(self._connect_hop(route, hop, sock, via))
        except BaseException:
            for client in reversed(clients):
                client.close()
            raise
        return clients

    def _drop(self) -> None:
        for client in reversed(self._clients):
            client.close()
        self._clients = []

    def _drop_if_current(self, transport: paramiko.Transport) -> None:
        """Forget a dead connection, unless another thread has already replaced it."""
        with self._lock:
            if self._clients and self._clients[-1].get_transport() is transport:
                self._drop()

    def _transport(self) -> paramiko.Transport:
        with self._lock:
            transport = self._clients[-1].get_transport() if self._clients else None
            if transport is None or not transport.is_active():
                self._drop()
                self._clients = self._connect()
                self._connected_once = True
                transport = self._clients[-1].get_transport()
                assert transport is not None
            return transport

    # -- commands -----------------------------------------------------------------------------

    def _start(self, command: str, deadline: float) -> paramiko.Channel:
        """A channel running ``command``; reconnects (with backoff) if the connection dropped."""
        # A node never reached fails at once; one that answered before gets a few tries.
        tries = 1 + (len(self.backoff_s) if self._connected_once else 0)
        cause = ""
        for attempt in range(tries):
            if attempt:
                time.sleep(max(0.0, min(self.backoff_s[attempt - 1], deadline - time.monotonic())))
            remaining = deadline - time.monotonic()
            if remaining <= 0:  # the command's own deadline bounds the retries too
                raise TransportError(f"{cause} (gave up at the command's deadline)" if cause
                                     else f"{self.node}: no time left to start the command")
            try:
                transport = self._transport()
            except _Transient as exc:
                cause = str(exc)
                continue
            channel: paramiko.Channel | None = None
            try:
                channel = transport.open_session(
                    timeout=min(self.target.connect_timeout_s, max(remaining, 0.001)))
                channel.exec_command(command)
                return channel
            except paramiko.ChannelException as exc:
                # The connection is fine but sshd refused one more session (MaxSessions): other
                # commands are running on it, so keep it and try again after a pause.
                cause = f"{self.node}: sshd refused a new session: {exc.text}"
            except (paramiko.SSHException, OSError, EOFError) as exc:
                # The connection died while idle: it is found out only now. Nothing ran yet.
                cause = f"{self.node}: connection lost: {_describe(exc)}"
                if channel is not None:
                    channel.close()
                self._drop_if_current(transport)
        if tries == 1:
            raise TransportError(cause)
        raise TransportError(f"{cause} (gave up after {tries} attempts)")

    def run(self, argv: Sequence[str], *, timeout_s: float = 60.0) -> CommandResult:
        args = tuple(argv)
        if not args:
            raise ValueError("empty argv")
        refuse_unsendable(self.node, args)
        deadline = time.monotonic() + timeout_s
        channel = self._start(shlex.join(args), deadline)
        try:
            channel.shutdown_write()  # no stdin, like the local transport's /dev/null
            out, err = self._collect(channel, deadline, timeout_s, args)
        finally:
            channel.close()
        return CommandResult(args, channel.recv_exit_status(), out, err)

    def _collect(self, channel: paramiko.Channel, deadline: float, timeout_s: float,
                 args: tuple[str, ...]) -> tuple[str, str]:
        out, err = bytearray(), bytearray()
        exited_at: float | None = None
        while True:
            while channel.recv_ready():
                out += channel.recv(65536)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            if channel.eof_received or channel.closed:
                break
            now = time.monotonic()
            if now >= deadline:
                raise TransportError(self._timeout_message(args, timeout_s))
            if channel.exit_status_ready():
                exited_at = exited_at or now
                if now - exited_at > _EOF_GRACE_S:
                    break
            # The channel's pipe fd wakes us on data, EOF and close; exit status only by polling.
            select.select([channel], [], [], min(deadline - now, 0.1 if exited_at else 1.0))
        while channel.recv_ready():  # what came between the last drain and the EOF
            out += channel.recv(65536)
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
            raise TransportError(self._timeout_message(args, timeout_s))
        transport = channel.get_transport()
        if channel.recv_exit_status() == -1 and self._lost(transport):
            self._drop_if_current(transport)
            raise TransportError(f"{self.node}: connection lost while running {args[0]}; "
                                 f"it may or may not have completed")
        return out.decode(errors="replace"), err.decode(errors="replace")

    @staticmethod
    def _lost(transport: paramiko.Transport) -> bool:
        """No exit status: the connection died, or the command was killed by a signal (sshd sends
        exit-signal, which paramiko drops). paramiko closes the channels a moment before it marks
        the connection inactive, so give it that moment."""
        deadline = time.monotonic() + 0.5
        while transport.is_active() and time.monotonic() < deadline:
            time.sleep(0.01)
        return not transport.is_active()

    def _timeout_message(self, args: tuple[str, ...], timeout_s: float) -> str:
        return (f"{self.node}: {args[0]} timed out after {timeout_s:g}s "
                f"(the remote command may still be running)")

    def close(self) -> None:
        with self._lock:
            self._drop()
