"""What the sandbox answers to one request, independent of the HTTP server that sends it."""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html import escape

# A stream gets a ``sleep(seconds) -> bool`` that returns False once the server is stopping.
Sleep = Callable[[float], bool]
StreamFactory = Callable[[Sleep], Iterator[bytes]]


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    delay: float = 0.0  # seconds slept before the status line is sent
    stream: StreamFactory | None = None  # body produced while sending (replaces ``body``)
    length: int | None = None  # Content-Length of a stream; None sends it chunked
    header_trickle: float = 0.0  # > 0: status line and headers sent one byte every so often

    @property
    def n_bytes(self) -> int:
        """Bytes of body this response announces (0 for a chunked stream)."""
        if self.stream is not None:
            return self.length or 0
        return len(self.body)


class ServerState:
    """Per-server mutable state: the stop signal and the ``/flaky/<key>`` counters."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def sleep(self, seconds: float) -> bool:
        """Sleep, waking early when the server stops; True when the full time passed."""
        return not self.stopping.wait(max(0.0, seconds))

    def count(self, key: str) -> int:
        """How many times ``key`` was counted before, then count it once more."""
        with self._lock:
            seen = self._counts.get(key, 0)
            self._counts[key] = seen + 1
            return seen


def html(status: int, title: str, text: str = "", delay: float = 0.0) -> Response:
    """A small UTF-8 HTML page."""
    body = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"</head><body><h1>{escape(title)}</h1><p>{escape(text)}</p></body></html>\n")
    return Response(status, body.encode("utf-8"), delay=delay)


def plain(status: int, text: str) -> Response:
    return Response(status, text.encode("utf-8"), "text/plain; charset=utf-8")


def redirect(status: int, location: str) -> Response:
    response = html(status, "Moved", location)
    response.headers.append(("Location", location))
    return response


def not_found() -> Response:
    return html(404, "Not found", "The sandbox has no page at this address.")


def tiny_png(width: int = 8, height: int = 8) -> bytes:
    """A real (valid) RGB PNG image of a grey gradient."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"".join(b"\x00" + bytes((x * 30) % 256 for x in range(width * 3))
                    for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


PNG = tiny_png()


def image() -> Response:
    return Response(200, PNG, "image/png")
