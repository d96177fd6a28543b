"""A server that is healthy and answers every chat request with garbage, one kind per start.

``python -m tests.support.garbage_server --port P`` with ``GARBAGE_REPLY=KIND`` in its
environment (a campaign level sets it): `/health` is 200, `/metrics` is not Prometheus text,
and `/v1/chat/completions` answers as KIND says. None of these is a model's output: each is a
broken server reply, which the workload must count as an error, never as corruption. The
kinds of ``RAW`` are broken below the JSON (or everywhere): every request but `/health`'s,
`/server_info` and `/v1/models` included, gets the same bytes, and the connection is closed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import os
import sys

ENV = "GARBAGE_REPLY"
JSON, SSE = "application/json", "text/event-stream"
_CALL = ('{"id":"c1","type":"function","function":{"name":%s,"arguments":"{}"}}')
_CHOICE = ('{"index":%s,"finish_reason":"tool_calls","message":{"role":"assistant",'
           '"content":null,"tool_calls":[%s]}}')
# KIND -> (content type, body)
REPLIES: dict[str, tuple[str, bytes]] = {
    "html": (JSON, b"<html><body>502 Bad Gateway</body></html>"),
    "empty": (JSON, b""),
    "truncated": (JSON, b'{"id":"x","choices":[{"index":0,"message":{"role":"assist'),
    "invalid_utf8": (JSON, b'{"id":"x","choices":[{"index":0,"finish_reason":"stop",'
                           b'"message":{"role":"assistant","content":"\xff\xfe\xfd"}}]}'),
    "nan_in_envelope": (JSON, ('{"id":"x","choices":[%s]}' % (
        _CHOICE % ("NaN", _CALL % '"read_file"'))).encode()),
    "choices_not_a_list": (JSON, b'{"id":"x","choices":"none"}'),
    "name_a_list": (JSON, ('{"id":"x","choices":[%s]}' % (
        _CHOICE % ("0", _CALL % "[]"))).encode()),
    "sse_garbage": (SSE, b"data: {not json\n\ndata: [DONE]\n\n"),
    "sse_without_done": (SSE, b'data: {"id":"x","choices":[{"index":0,"delta":'
                              b'{"role":"assistant"}}]}\n\n'),
}

_PLAIN = (b'{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,'
          b'"finish_reason":"stop","message":{"role":"assistant","content":"hi"}}],'
          b'"usage":{"prompt_tokens":3,"completion_tokens":1}}')
_NAN_USAGE = _PLAIN.replace(b'"prompt_tokens":3', b'"prompt_tokens":NaN')
# a well-formed reply after the head: the head alone must make it an error
_CLOSE = b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_PLAIN), _PLAIN)
# KIND -> the raw bytes of every answer but /health's
RAW: dict[str, bytes] = {
    "usage_nan": (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close"
                  b"\r\nContent-Length: %d\r\n\r\n%s" % (len(_NAN_USAGE), _NAN_USAGE)),
    "status_line_garbage": b"HTTQ/9.x \xff\xfe not a status line\r\n\r\n{}",
    # 4,000 headers in 37 KiB: under the client's 64 KiB head, over http.client's 100 lines
    "header_flood": (b"HTTP/1.1 200 OK\r\n"
                     + b"".join(b"F%d: v\r\n" % n for n in range(4000)) + _CLOSE),
    "huge_header": b"HTTP/1.1 200 OK\r\nX-Huge: " + b"a" * (1 << 20) + b"\r\n" + _CLOSE,
}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _raw(self) -> bool:
        """Answer with the RAW kind's bytes (and close), if the kind is one."""
        raw = RAW.get(os.environ[ENV])
        if raw is not None:
            with contextlib.suppress(ConnectionError):  # a client that stopped reading a flood
                self.wfile.write(raw)
            self.close_connection = True
        return raw is not None

    def do_GET(self) -> None:
        if self.path.startswith("/health"):
            self._send(200, "text/plain", b"ok")
        elif self._raw():
            pass
        elif self.path == "/metrics":
            self._send(200, "text/plain", b"sglang:num_running_reqs{{{ \xff not prometheus\n")
        elif self.path == "/v1/models":
            self._send(200, JSON, b'{"data":[{"id":"garbage"}]}')
        else:
            self._send(404, "text/plain", b"no")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not self._raw():
            kind, body = REPLIES[os.environ[ENV]]
            self._send(200, kind, body)

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"garbage: {format % args}\n")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.garbage_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    if os.environ.get(ENV) not in (*REPLIES, *RAW):
        parser.error(f"${ENV} must be one of {', '.join((*REPLIES, *RAW))}")
    server = http.server.ThreadingHTTPServer((args.host, args.port), _Handler)
    print(f"garbage server on {args.host}:{args.port}: {os.environ[ENV]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
