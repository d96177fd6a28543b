"""The fault proxy itself: each toxiproxy kind does what it says, against real loopback servers.

Delays are checked as lower bounds only (a toxic can make traffic slower, never faster), so no
check depends on how fast this machine is.
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support.fault_proxy import FaultProxy, Toxic
from tests.support.tcp_servers import echo, read_all, serving, speaker

pytestmark = pytest.mark.real

PAYLOAD = bytes(range(256)) * 200  # 51,200 bytes


@pytest.fixture
def echo_proxy() -> Iterator[FaultProxy]:
    with serving(echo) as upstream, FaultProxy(upstream, seed=1) as proxy:
        yield proxy


@pytest.fixture
def speaker_proxy() -> Iterator[FaultProxy]:
    with serving(speaker(PAYLOAD)) as upstream, FaultProxy(upstream, seed=1) as proxy:
        yield proxy


def connect(proxy: FaultProxy, timeout_s: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout_s)


def round_trip(proxy: FaultProxy, data: bytes = b"ping") -> bytes:
    with connect(proxy) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        return read_all(sock)[0]


def test_a_clean_proxy_passes_every_byte_both_ways(echo_proxy: FaultProxy) -> None:
    assert round_trip(echo_proxy, PAYLOAD) == PAYLOAD
    assert echo_proxy.stats.accepted == 1


def test_latency_delays_each_direction(echo_proxy: FaultProxy) -> None:
    echo_proxy.add(Toxic("latency", "upstream", latency_ms=150, jitter_ms=20))
    echo_proxy.add(Toxic("latency", "downstream", latency_ms=150))
    began = time.monotonic()
    assert round_trip(echo_proxy) == b"ping"
    assert time.monotonic() - began >= 0.28  # 130 ms at least up, 150 ms down


def test_bandwidth_caps_the_rate(speaker_proxy: FaultProxy) -> None:
    speaker_proxy.add(Toxic("bandwidth", rate_kbps=100))
    began = time.monotonic()
    with connect(speaker_proxy) as sock:
        assert read_all(sock)[0] == PAYLOAD
    assert time.monotonic() - began >= 0.45  # 50 KB at 100 KB/s


def test_slow_close_passes_the_close_on_late(speaker_proxy: FaultProxy) -> None:
    speaker_proxy.add(Toxic("slow_close", delay_ms=400))
    with connect(speaker_proxy) as sock:
        data = bytearray()
        while len(data) < len(PAYLOAD):
            data += sock.recv(65536)
        got_data = time.monotonic()
        assert sock.recv(1) == b""  # the close, once it comes
        assert time.monotonic() - got_data >= 0.35


def test_timeout_zero_hangs_until_the_toxic_is_removed(echo_proxy: FaultProxy) -> None:
    name = echo_proxy.add(Toxic("timeout", "upstream", timeout_ms=0))
    with connect(echo_proxy, timeout_s=0.5) as sock:
        sock.sendall(b"held")
        with pytest.raises(TimeoutError):
            sock.recv(16)
        echo_proxy.remove(name)  # the heal: the held data goes through
        sock.settimeout(10)
        assert sock.recv(16) == b"held"


def test_timeout_closes_the_connection_without_passing_data(echo_proxy: FaultProxy) -> None:
    echo_proxy.add(Toxic("timeout", "upstream", timeout_ms=100))
    assert round_trip(echo_proxy, b"lost") == b""
    assert echo_proxy.stats.cut == 1


def test_reset_peer_resets_the_connection(speaker_proxy: FaultProxy) -> None:
    speaker_proxy.add(Toxic("reset_peer", timeout_ms=50))
    with connect(speaker_proxy) as sock, pytest.raises(ConnectionResetError):
        read_all(sock)
    assert speaker_proxy.stats.reset == 1


def test_slicer_cuts_the_stream_into_small_pieces_and_keeps_every_byte(
        speaker_proxy: FaultProxy) -> None:
    speaker_proxy.add(Toxic("slicer", average_size=64, size_variation=32, delay_us=200))
    with connect(speaker_proxy) as sock:
        data, sizes = read_all(sock)
    assert data == PAYLOAD
    pieces = speaker_proxy.stats.pieces
    assert sum(pieces) == len(PAYLOAD) and max(pieces) <= 96 and min(pieces) >= 1
    assert len(sizes) > 1  # the client saw it arrive in parts, too


def test_limit_data_closes_after_so_many_bytes_in_its_direction(
        speaker_proxy: FaultProxy) -> None:
    speaker_proxy.add(Toxic("limit_data", bytes=1000))
    with connect(speaker_proxy) as sock:
        assert read_all(sock)[0] == PAYLOAD[:1000]
    received: list[bytes] = []
    heard = threading.Event()

    def record(conn: socket.socket) -> None:
        received.append(read_all(conn)[0])
        heard.set()

    with serving(record) as upstream, FaultProxy(upstream) as proxy:
        proxy.add(Toxic("limit_data", "upstream", bytes=10))
        assert round_trip(proxy, PAYLOAD) == b""  # closed
        assert heard.wait(10) and received == [PAYLOAD[:10]]  # the server only ever got 10


def test_a_toxic_acts_on_connections_already_open(echo_proxy: FaultProxy) -> None:
    with connect(echo_proxy) as sock:
        sock.sendall(b"before")
        assert sock.recv(16) == b"before"
        echo_proxy.add(Toxic("reset_peer"))
        sock.sendall(b"after")
        with pytest.raises(ConnectionResetError):
            read_all(sock)


def test_toxicity_is_the_share_of_connections_hit_and_seeded(echo_proxy: FaultProxy) -> None:
    echo_proxy.add(Toxic("limit_data", toxicity=0.5, bytes=0))
    hit = [round_trip(echo_proxy) == b"" for _ in range(30)]
    assert 5 <= sum(hit) <= 25
    with serving(echo) as upstream, FaultProxy(upstream, seed=1) as again:
        again.add(Toxic("limit_data", toxicity=0.5, bytes=0))
        assert [round_trip(again) == b"" for _ in range(30)] == hit  # same seed, same draws
    echo_proxy.clear()
    assert round_trip(echo_proxy) == b"ping"


def test_down_refuses_and_cuts_and_up_heals(echo_proxy: FaultProxy) -> None:
    with connect(echo_proxy) as sock:
        sock.sendall(b"x")
        assert sock.recv(1) == b"x"
        echo_proxy.down()
        with pytest.raises(ConnectionResetError):
            read_all(sock)
    with pytest.raises(ConnectionRefusedError):
        connect(echo_proxy)
    echo_proxy.up()
    assert round_trip(echo_proxy) == b"ping"


def test_an_unreachable_upstream_closes_the_client(echo_proxy: FaultProxy) -> None:
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        dead = spare.getsockname()[1]  # bound, never listening: refused
        with FaultProxy(("127.0.0.1", dead)) as proxy, connect(proxy) as sock:
            assert read_all(sock)[0] == b""
            assert proxy.stats.refused_upstream == 1


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello " * 1000
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def test_an_http_server_through_the_proxy() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with FaultProxy(("127.0.0.1", server.server_address[1])) as proxy:
            with urllib.request.urlopen(proxy.url("/"), timeout=10) as response:
                assert response.read() == b"hello " * 1000
            with (proxy.toxic(Toxic("slicer", average_size=3, size_variation=2)),
                  urllib.request.urlopen(proxy.url("/"), timeout=10) as response):
                assert response.read() == b"hello " * 1000
            broken = (urllib.error.URLError, http.client.IncompleteRead, ConnectionError)
            with (proxy.toxic(Toxic("limit_data", bytes=200)), pytest.raises(broken),
                  urllib.request.urlopen(proxy.url("/"), timeout=10) as response):
                response.read()
            assert proxy.toxics() == []
    finally:
        server.shutdown()
        server.server_close()
