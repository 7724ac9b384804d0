"""``SandboxServer``: serves a ``SandboxWeb`` on loopback as an HTTP proxy and a plain server.

A request line in absolute form (``GET http://a.test/x HTTP/1.1``, what a client sends to a
proxy) names the host; otherwise the ``Host:`` header does. HTTP/1.1 keep-alive, one thread per
connection, every request logged.
"""

from __future__ import annotations

import logging
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple
from urllib.parse import urlsplit

from jlse.sandbox import search
from jlse.sandbox.response import Response, ServerState, plain
from jlse.sandbox.web import SandboxWeb

log = logging.getLogger(__name__)

NO_BODY_STATUSES = (204, 304)
CLIENT_CHECK = 0.5  # seconds between checks that a client waiting for a delay is still there


class RequestLogEntry(NamedTuple):
    t: float  # time.monotonic() when the request arrived (before latency and delays)
    host: str
    path: str  # path with query
    status: int
    user_agent: str
    n_bytes: int  # body bytes announced (0 for chunked streams)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "jlse-sandbox/1.0"
    disable_nagle_algorithm = True  # headers and body are separate writes
    timeout = 120  # idle keep-alive connections are dropped after this
    server: _HTTPServer

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_CONNECT(self) -> None:
        self._send(plain(501, "The sandbox proxy does not tunnel (CONNECT)."), "", head=False)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def _target(self) -> tuple[str, str]:
        """(host, path with query) of the request, from the absolute URL or the Host header."""
        if self.path.startswith(("http://", "https://")):
            parts = urlsplit(self.path)
            host = (parts.hostname or "").lower()
            return host, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip().lower()
        return host, self.path or "/"

    def _serve(self, head: bool) -> None:
        state = self.server.state
        host, path = self._target()
        try:
            response = self.server.web.respond(host, path, state)
        except Exception:  # a sandbox bug must not kill the connection silently
            log.exception("sandbox: error answering %s%s", host, path)
            response = plain(500, "sandbox: internal error")
        if response is None:
            response = plain(502, f"sandbox proxy: unknown host {host!r}")
        self.server.record(RequestLogEntry(time.monotonic(), host, path, response.status,
                                           self.headers.get("User-Agent", ""),
                                           response.n_bytes))
        if not self._wait(self.server.latency + response.delay):
            self.close_connection = True
            return
        self._send(response, path, head)

    def _wait(self, seconds: float) -> bool:
        """Sleep before answering; False when the server stops or the client leaves first (a
        long delay must not keep one thread per abandoned request)."""
        state = self.server.state
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > CLIENT_CHECK:
            if not state.sleep(CLIENT_CHECK) or self._client_left():
                return False
        return state.sleep(left)

    def _client_left(self) -> bool:
        """Whether the connection reached its end (a poll first: a socket with a timeout
        waits for data in ``recv`` whatever its flags)."""
        poller = select.poll()
        poller.register(self.connection, select.POLLIN)
        if not poller.poll(0):
            return False
        try:
            return not self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return True

    def _send(self, response: Response, path: str, head: bool) -> None:
        try:
            if response.header_trickle > 0:
                self._trickle_headers(response)
                return
            self.send_response(response.status)
            if response.content_type:
                self.send_header("Content-Type", response.content_type)
            for name, value in response.headers:
                self.send_header(name, value)
            if response.stream is not None:
                self._send_stream(response, head)
                return
            if response.status not in NO_BODY_STATUSES:
                self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if not head and response.status not in NO_BODY_STATUSES:
                self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            log.debug("sandbox: client went away during %s", path)
            self.close_connection = True

    def _trickle_headers(self, response: Response) -> None:
        """The status line and headers, one byte at a time (a server that never finishes)."""
        self.close_connection = True
        head = (f"HTTP/1.1 {response.status} OK\r\nContent-Type: {response.content_type}\r\n"
                f"Content-Length: {len(response.body)}\r\n\r\n").encode()
        for byte in head:
            self.wfile.write(bytes((byte,)))
            self.wfile.flush()
            if not self.server.state.sleep(response.header_trickle):
                return
        self.wfile.write(response.body)

    def _send_stream(self, response: Response, head: bool) -> None:
        chunked = response.length is None
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(response.length))
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        if head:
            return
        for chunk in response.stream(self.server.state.sleep):
            if chunked:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            else:
                self.wfile.write(chunk)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # hanging handlers must not block stop()
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], web: SandboxWeb, latency: float) -> None:
        super().__init__(address, _Handler)
        self.web = web
        self.latency = latency
        self.state = ServerState()
        self.log: list[RequestLogEntry] = []
        self.log_lock = threading.Lock()
        self.connections: set[socket.socket] = set()

    def handle_error(self, request, client_address) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):  # the client went away
            log.debug("sandbox: connection from %s ended: %s", client_address, error)
        else:
            log.exception("sandbox: error serving %s", client_address)

    def record(self, entry: RequestLogEntry) -> None:
        with self.log_lock:
            self.log.append(entry)

    def process_request(self, request, client_address) -> None:
        with self.log_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self.log_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.log_lock:
            open_sockets = list(self.connections)
        for sock in open_sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class SandboxServer:
    """Serves ``web`` on ``host:port`` (port 0 picks a free one) in a background thread."""

    def __init__(self, web: SandboxWeb, host: str = "127.0.0.1", port: int = 0,
                 latency: float = 0.0) -> None:
        self.web = web
        self.host = host
        self.requested_port = port
        self.latency = latency
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopped_log: list[RequestLogEntry] = []

    def start(self) -> None:
        if self._httpd is not None:
            return
        self._httpd = _HTTPServer((self.host, self.requested_port), self.web, self.latency)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={
            "poll_interval": 0.2}, name="sandbox-server", daemon=True)
        self._thread.start()
        if self.web.discovery:  # a discovery web is there to be searched: index it now
            self.web.search_engine.warm_up()
        log.info("sandbox web serving on %s", self.proxy_url)

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.state.stopping.set()  # wakes sleeping handlers (slow, hang, trickle)
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._stopped_log = list(httpd.log)

    def set_latency(self, seconds: float) -> None:
        """Delay every response from now on by ``seconds`` (a running server too)."""
        self.latency = seconds
        if self._httpd is not None:
            self._httpd.latency = seconds

    def __enter__(self) -> SandboxServer:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _server(self) -> _HTTPServer:
        if self._httpd is None:
            raise RuntimeError("the sandbox server is not running; call start() first")
        return self._httpd

    @property
    def port(self) -> int:
        return self._server().server_address[1]

    @property
    def proxy_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def base_url(self, host: str) -> str:
        return f"http://{host}/"

    @property
    def log(self) -> list[RequestLogEntry]:
        """A snapshot of every request answered so far (oldest first)."""
        if self._httpd is None:
            return list(self._stopped_log)
        with self._httpd.log_lock:
            return list(self._httpd.log)

    def clear_log(self) -> None:
        if self._httpd is not None:
            with self._httpd.log_lock:
                self._httpd.log.clear()

    def search_log(self) -> list[RequestLogEntry]:
        """The logged requests the search engine answered (``search.test`` or direct ones)."""
        return [entry for entry in self.log if search.serves(entry.host)]

    def request_count(self, host: str | None = None) -> int:
        entries = self.log
        if host is None:
            return len(entries)
        return sum(1 for entry in entries if entry.host == host.lower())
