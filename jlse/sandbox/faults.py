"""``faults.test``: fixed paths for every failure a fetcher must survive, and the
``robots-*.test`` hosts with awkward robots.txt files. These paths are an interface: the fetcher's
tests are written against them.
"""

from __future__ import annotations

import random
import re
import struct
import threading
import zlib
from collections.abc import Iterator
from functools import cache, lru_cache
from urllib.parse import parse_qs

from jlse.sandbox import response as r
from jlse.sandbox.fault_encodings import ENCODING_SAMPLES, encoding_page

__all__ = ["ENCODING_SAMPLES", "FAULT_HOST", "ROBOTS_HOSTS", "fault_response",
           "fault_robots_rules", "robots_host_response"]

FAULT_HOST = "faults.test"
FAULT_ROBOTS = "User-agent: *\nDisallow: /private/\n"
ROBOTS_HOSTS = ("robots-404.test", "robots-500.test", "robots-hang.test", "robots-delay.test",
                "robots-redirect.test")
_ROBOTS_TEXT = {
    "robots-hang.test": "User-agent: *\nDisallow:\n",  # only ever seen after 60 s
    "robots-delay.test": "User-agent: *\nCrawl-delay: 2\nDisallow: /no/\n",
    "robots-redirect.test": "User-agent: *\nDisallow: /blocked/\n",  # at /real-robots.txt
}

HANG_SECONDS = 60.0
MAX_SLOW_SECONDS = 30.0
HUGE_BYTES = 20 * 1024 * 1024
BOMB_BYTES = 1024 * 1024 * 1024  # decompressed size of the gzip bomb
TRICKLE_BYTES, TRICKLE_INTERVAL = 120, 0.5  # 60 s in all

FAULT_LINKS = (
    "/ok.html", "/private/secret.html", "/redirect/3", "/redirect/0", "/redirect-loop/a",
    "/redirect-private", "/redirect-metadata", "/redirect-robots", "/redirect-relative",
    "/status/404", "/status/500", "/status/503", "/flaky/links", "/slow?seconds=2", "/hang",
    "/trickle", "/huge.html", "/huge-nolength.html", "/binary.bin", "/image.png",
    "/binary-as-html", "/gzip-bomb.html", "/malformed.html",
    *(f"/enc/{name}" for name in ENCODING_SAMPLES),
)

MALFORMED = (
    "<html><head><title>Malformed page</title>\n<body bgcolor=white>\n<div><div class=a>\n"
    "<p>Broken <b>markup <i>everywhere</b></i>\n</div></div></div></span>\n"
    "<!-- a broken comment -- -- > still in it? -->\n"
    "<p>null\x00bytes\x00here <a href=/ok.html>the ok page</a>\n"
    "<script>var s = '<a href=\"/from-script.html\">not a link</a>'; if (a < b) {}</script>\n"
    "<table><tr><td>cell<td>cell <a href='/status/404' class=x>missing page</a>\n"
    "<p><a href=/redirect/1 title=unquoted>a redirect<p>unclosed <ul><li>one<li>two\n"
)


def fault_robots_rules(host: str) -> str | None:
    """The robots.txt rules that apply on a fault host (after redirects), or None."""
    if host == FAULT_HOST:
        return FAULT_ROBOTS
    return _ROBOTS_TEXT.get(host)


def _links_page() -> r.Response:
    items = "".join(f'<li><a href="{path}">{path}</a></li>' for path in FAULT_LINKS)
    body = ('<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Fault index</title></head>'
            f"<body><h1>Every fault of the sandbox</h1><ul>{items}</ul></body></html>\n")
    return r.Response(200, body.encode("utf-8"))


def _huge_stream(sleep: r.Sleep) -> Iterator[bytes]:
    """Exactly HUGE_BYTES of valid HTML, in 64 KiB chunks."""
    head = b"<!DOCTYPE html>\n<html><head><title>Huge page</title></head><body>\n"
    tail = b"</body></html>\n"
    line = b"<p>" + b"This page is very large. " * 40
    line = line[:1019] + b"</p>\n"  # 1024 bytes
    n_lines, padding = divmod(HUGE_BYTES - len(head) - len(tail), len(line))
    yield head
    for start in range(0, n_lines, 64):
        yield line * min(64, n_lines - start)
    yield b" " * padding + tail


def _trickle_stream(sleep: r.Sleep) -> Iterator[bytes]:
    head, tail = b"<html><body><p>", b"</p></body></html>\n"
    body = head + b"." * (TRICKLE_BYTES - len(head) - len(tail)) + tail
    for byte in body:
        if not sleep(TRICKLE_INTERVAL):
            return
        yield bytes([byte])


_bomb_lock = threading.Lock()


@lru_cache(maxsize=1)
def _gzip_bomb() -> bytes:
    """~1 MB of gzip that inflates to BOMB_BYTES of spaces.

    After a full flush deflate restarts from a clean state, so every further 1 MiB block of
    spaces compresses to the same bytes: compress two blocks, repeat the second, and write the
    trailer (CRC-32 and length of the whole input) ourselves.
    """
    block = b" " * (1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeat = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush()[:-8]  # final empty block, without the (wrong) trailer
    n_blocks = BOMB_BYTES // len(block)
    crc = 0
    for _ in range(n_blocks):
        crc = zlib.crc32(block, crc)
    trailer = struct.pack("<II", crc, BOMB_BYTES & 0xFFFFFFFF)
    return first + repeat * (n_blocks - 1) + end + trailer


def gzip_bomb() -> bytes:
    with _bomb_lock:  # built once, even when several requests arrive together
        return _gzip_bomb()


@cache
def _random_bytes(n_bytes: int, tag: str) -> bytes:
    return random.Random(f"faults|{tag}").randbytes(n_bytes)


def _redirect(path: str) -> r.Response | None:
    if match := re.fullmatch(r"/redirect/(\d{1,4})", path):
        hops = int(match.group(1))
        return r.redirect(302, "/ok.html" if hops == 0 else f"/redirect/{hops - 1}")
    targets = {
        "/redirect-loop/a": "/redirect-loop/b",
        "/redirect-loop/b": "/redirect-loop/a",
        "/redirect-private": "http://127.0.0.1:9/x",
        "/redirect-metadata": "http://169.254.169.254/latest/meta-data/",
        "/redirect-robots": "/private/secret.html",
        # Hostile Locations (not in FAULT_LINKS: tests and the hostile web seed them)
        "/redirect-bad-location": "http://[::1",  # not a URL at all
        "/redirect-encoded-host": "http://%31%32%37.0.0.1/latest/meta-data/",  # 127.0.0.1
        "/redirect-encoded-name": "http://loc%61lhost:6379/",  # localhost
        "/redirect-number-host": "http://2130706433/",  # 127.0.0.1
    }
    if path in targets:
        return r.redirect(302, targets[path])
    if path == "/redirect-relative":
        return r.redirect(301, "../ok.html")
    return None


def _status(code_text: str) -> r.Response:
    code = int(code_text)
    if not 200 <= code <= 599:
        return r.html(400, "Bad status", f"/status/ takes a code from 200 to 599, not {code}")
    if code in (204, 304):
        return r.Response(code, b"", "")
    return r.html(code, f"Status {code}", "Served on request.")


def _slow(query: str) -> r.Response:
    try:
        seconds = float(parse_qs(query).get("seconds", ["1"])[0])
    except ValueError:
        return r.html(400, "Bad request", "seconds must be a number")
    seconds = min(max(seconds, 0.0), MAX_SLOW_SECONDS)
    return r.html(200, "Slow page", f"Answered after {seconds} s", delay=seconds)


def _binary(path: str) -> r.Response | None:
    if path == "/binary.bin":
        return r.Response(200, _random_bytes(1 << 20, "binary"), "application/octet-stream")
    if path == "/binary-as-html":
        return r.Response(200, _random_bytes(100_000, "as-html"), "text/html")
    if path == "/image.png":
        return r.image()
    if path == "/gzip-bomb.html":
        return r.Response(200, gzip_bomb(), "text/html", [("Content-Encoding", "gzip")])
    if path == "/huge.html":
        return r.Response(200, content_type="text/html; charset=utf-8", stream=_huge_stream,
                          length=HUGE_BYTES)
    if path == "/huge-nolength.html":
        return r.Response(200, content_type="text/html; charset=utf-8", stream=_huge_stream)
    return None


def fault_response(path: str, query: str, state: r.ServerState) -> r.Response:
    """The answer of ``faults.test`` for one path."""
    simple = {
        "/robots.txt": lambda: r.plain(200, FAULT_ROBOTS),
        "/ok.html": lambda: r.html(200, "OK page", "Everything is fine."),
        "/private/secret.html": lambda: r.html(200, "Secret page", "Robots.txt disallows this."),
        "/": _links_page,
        "/links.html": _links_page,
        "/malformed.html": lambda: r.Response(200, MALFORMED.encode("utf-8")),
        "/hang": lambda: r.html(200, "Hung page", "Answered after a minute", delay=HANG_SECONDS),
        "/trickle": lambda: r.Response(200, content_type="text/html; charset=utf-8",
                                       stream=_trickle_stream, length=TRICKLE_BYTES),
        "/slow": lambda: _slow(query),
    }
    if path in simple:
        return simple[path]()
    if path.startswith("/redirect"):
        return _redirect(path) or r.not_found()
    if match := re.fullmatch(r"/status/(\d{3})", path):
        return _status(match.group(1))
    if match := re.fullmatch(r"/flaky/([\w.-]{1,100})", path):
        if state.count(f"flaky|{match.group(1)}") < 2:
            return r.html(503, "Service unavailable", "Try again.")
        return r.html(200, "Flaky page", "Third time lucky.")
    if path.startswith("/enc/"):
        return encoding_page(path.removeprefix("/enc/")) or r.not_found()
    return _binary(path) or r.not_found()


def _robots_page(host: str, number: int) -> r.Response:
    links = [f'<a href="/page/{n}.html">page {n}</a>' for n in (number + 1, number + 2) if n < 50]
    if host == "robots-delay.test":
        links.append('<a href="/no/secret.html">disallowed</a>')
    if host == "robots-redirect.test":
        links.append('<a href="/blocked/secret.html">disallowed</a>')
    body = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{host} page {number}'
            f"</title></head><body><h1>Page {number}</h1><p>{' '.join(links)}</p></body></html>\n")
    return r.Response(200, body.encode("utf-8"))


def robots_host_response(host: str, path: str) -> r.Response:
    """The answer of one of the ``robots-*.test`` hosts."""
    if path == "/robots.txt":
        if host == "robots-404.test":
            return r.not_found()
        if host == "robots-500.test":
            return r.plain(500, "robots.txt: internal server error")
        if host == "robots-redirect.test":
            return r.redirect(301, "/real-robots.txt")
        response = r.plain(200, _ROBOTS_TEXT[host])
        response.delay = HANG_SECONDS if host == "robots-hang.test" else 0.0
        return response
    if path == "/real-robots.txt" and host == "robots-redirect.test":
        return r.plain(200, _ROBOTS_TEXT[host])
    if match := re.fullmatch(r"/page/(\d{1,6})\.html", path):
        return _robots_page(host, int(match.group(1)))
    if path.startswith(("/no/", "/blocked/")):
        return r.html(200, "Disallowed page", "A polite crawler never fetches this.")
    return r.not_found()
