"""Fetcher against the sandbox's faults.test host: one test per catalogue endpoint, and more."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc

import pytest

from jlse.records import Outcome
from jlse.sandbox.faults import ENCODING_SAMPLES, gzip_bomb
from jlse.scheduler.robots import RobotsCache
from jlse.settings import Settings
from jlse.workers.deadline import WATCH
from jlse.workers.fetcher import (
    ROBOTS_MAX_BYTES,
    Fetcher,
    FetchResult,
    invalid_url_reason,
    is_retryable,
    retry_wait,
)

BASE = "http://faults.test"
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)


def fast_settings(sandbox, **overrides) -> Settings:
    values = dict(
        proxy=sandbox.proxy_url,
        connect_timeout=1.0,
        read_timeout=1.0,
        fetch_deadline=3.0,
        max_retries=2,
        retry_backoff=0.05,
    )
    values.update(overrides)
    return Settings(**values)


@pytest.fixture()
def fetcher(sandbox):
    fetcher = Fetcher(fast_settings(sandbox))
    yield fetcher
    fetcher.close()


@pytest.fixture()
def no_env_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def served(sandbox, start: int, path: str) -> list:
    """Sandbox log entries for faults.test ``path`` since log index ``start``."""
    return [e for e in list(sandbox.log)[start:] if e.host == "faults.test" and e.path == path]


def test_ok_page(fetcher, sandbox) -> None:
    result = fetcher.fetch(f"{BASE}/ok.html")
    assert result.outcome is Outcome.OK, result.error
    assert result.status_code == 200 and result.content_type == "text/html"
    assert "OK page" in result.text and result.body and result.n_bytes > 0
    assert result.encoding and result.error == "" and result.elapsed > 0
    assert result.url == f"{BASE}/ok.html"


def test_user_agent_is_sent(sandbox) -> None:
    start = len(sandbox.log)
    Fetcher(fast_settings(sandbox, user_agent="jlse-test/9.9")).fetch(f"{BASE}/ok.html")
    assert [e.user_agent for e in served(sandbox, start, "/ok.html")] == ["jlse-test/9.9"]


def test_private_page_is_fetched_robots_is_not_the_fetchers_job(fetcher) -> None:
    result = fetcher.fetch(f"{BASE}/private/secret.html")
    assert result.outcome is Outcome.OK


def test_redirect_chain_is_handed_back_hop_by_hop(fetcher) -> None:
    url, hops = f"{BASE}/redirect/3", 0
    while True:
        result = fetcher.fetch(url)
        if result.outcome is not Outcome.REDIRECT:
            break
        assert result.redirect_to.startswith(BASE) and 300 <= result.status_code < 400
        url, hops = result.redirect_to, hops + 1
        assert hops <= 4
    assert result.outcome is Outcome.OK and "OK page" in result.text
    assert hops == 4 and url == f"{BASE}/ok.html"  # /redirect/3 → 2 → 1 → 0 → /ok.html


def test_redirect_loop_is_not_followed_inline(fetcher) -> None:
    first = fetcher.fetch(f"{BASE}/redirect-loop/a")
    assert first.outcome is Outcome.REDIRECT and first.redirect_to == f"{BASE}/redirect-loop/b"
    second = fetcher.fetch(first.redirect_to)
    assert second.redirect_to == f"{BASE}/redirect-loop/a"


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/redirect-private", "http://127.0.0.1:9/x"),
        ("/redirect-metadata", "http://169.254.169.254/latest/meta-data/"),
    ],
)
def test_redirect_to_an_internal_address_is_refused_at_the_next_hop(fetcher, path, target) -> None:
    result = fetcher.fetch(f"{BASE}{path}")
    assert result.outcome is Outcome.REDIRECT and result.redirect_to == target
    refused = fetcher.fetch(result.redirect_to)
    assert refused.outcome is Outcome.ADDRESS_REFUSED and refused.n_bytes == 0


def test_redirect_into_a_robots_disallowed_path(fetcher, sandbox) -> None:
    result = fetcher.fetch(f"{BASE}/redirect-robots")
    assert result.outcome is Outcome.REDIRECT
    assert result.redirect_to == f"{BASE}/private/secret.html"
    robots = RobotsCache(fetcher.settings, fetcher.fetch_robots)
    assert not robots.check(result.redirect_to).allowed


def test_relative_redirect_is_resolved(fetcher) -> None:
    result = fetcher.fetch(f"{BASE}/redirect-relative")
    assert result.outcome is Outcome.REDIRECT and result.status_code == 301
    assert result.redirect_to == f"{BASE}/ok.html"


def test_4xx_is_an_http_error_without_retries(fetcher, sandbox) -> None:
    start = len(sandbox.log)
    result = fetcher.fetch(f"{BASE}/status/404")
    assert result.outcome is Outcome.HTTP_ERROR and result.status_code == 404
    assert "404" in result.error and result.text is None and result.body == b""
    assert len(served(sandbox, start, "/status/404")) == 1


def test_5xx_is_one_request_and_worth_a_retry(fetcher, sandbox) -> None:
    """The fetcher never retries inline: the frontier does, after the host's delay."""
    start = len(sandbox.log)
    result = fetcher.fetch(f"{BASE}/status/500")
    assert result.outcome is Outcome.HTTP_ERROR and result.status_code == 500
    assert len(served(sandbox, start, "/status/500")) == 1
    assert is_retryable(result)
    assert not is_retryable(fetcher.fetch(f"{BASE}/status/404"))


def test_retry_wait_backs_off_and_honours_retry_after() -> None:
    settings = Settings(retry_backoff=0.5, max_crawl_delay=30.0)
    failed = FetchResult("http://a.test/", Outcome.HTTP_ERROR, status_code=503)
    assert [retry_wait(settings, failed, attempt) for attempt in range(3)] == [0.5, 1.0, 2.0]
    failed.retry_after = 12.0
    assert retry_wait(settings, failed, 0) == 12.0
    failed.retry_after = 3600.0
    assert retry_wait(settings, failed, 0) == 30.0  # capped at max_crawl_delay


def test_3xx_without_location_is_an_http_error(fetcher) -> None:
    result = fetcher.fetch(f"{BASE}/status/302")
    assert result.outcome is Outcome.HTTP_ERROR and result.status_code == 302
    assert "Location" in result.error


def test_slow_page_within_the_timeout(fetcher) -> None:
    assert fetcher.fetch(f"{BASE}/slow?seconds=0.2").outcome is Outcome.OK


def test_slow_page_beyond_the_read_timeout(fetcher) -> None:
    started = time.monotonic()
    result = fetcher.fetch(f"{BASE}/slow?seconds=2.5")
    assert result.outcome is Outcome.TIMEOUT
    assert time.monotonic() - started < 2.0


def test_hanging_page_times_out(fetcher) -> None:
    result = fetcher.fetch(f"{BASE}/hang")
    assert result.outcome is Outcome.TIMEOUT and result.elapsed < 2.0


def test_trickle_ends_at_the_total_deadline(sandbox) -> None:
    fetcher = Fetcher(fast_settings(sandbox, fetch_deadline=2.0))
    result = fetcher.fetch(f"{BASE}/trickle")
    assert result.outcome is Outcome.TIMEOUT and "deadline" in result.error
    assert 2.0 <= result.elapsed < 3.5
    assert result.body == b"" and result.text is None


def test_huge_page_with_content_length_is_refused_unread(fetcher) -> None:
    result = fetcher.fetch(f"{BASE}/huge.html")
    assert result.outcome is Outcome.TOO_LARGE and "Content-Length" in result.error
    assert result.n_bytes == 0 and result.body == b""


def test_huge_chunked_page_stops_at_the_byte_cap(sandbox) -> None:
    fetcher = Fetcher(fast_settings(sandbox, max_bytes=256 * 1024))
    result = fetcher.fetch(f"{BASE}/huge-nolength.html")
    assert result.outcome is Outcome.TOO_LARGE and result.body == b""
    assert 256 * 1024 < result.n_bytes <= 256 * 1024 + 128 * 1024


@pytest.mark.parametrize(
    ("path", "media_type"),
    [("/binary.bin", "application/octet-stream"), ("/image.png", "image/png")],
)
def test_non_html_is_not_read(fetcher, path, media_type) -> None:
    result = fetcher.fetch(f"{BASE}{path}")
    assert result.outcome is Outcome.NOT_HTML and result.content_type == media_type
    assert result.body == b"" and result.text is None and result.n_bytes == 0


def test_binary_labelled_as_html(fetcher) -> None:
    result = fetcher.fetch(f"{BASE}/binary-as-html")
    assert result.outcome is Outcome.NOT_HTML
    assert result.error == "binary body labelled as HTML" and result.body == b""


def test_gzip_bomb_stops_fast_with_bounded_memory(sandbox) -> None:
    cap = 1024 * 1024
    gzip_bomb()  # the sandbox builds the bomb on first use (seconds of CRC): not our time
    fetcher = Fetcher(fast_settings(sandbox, max_decompressed_bytes=cap))
    tracemalloc.start()
    try:
        result = fetcher.fetch(f"{BASE}/gzip-bomb.html")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.outcome is Outcome.TOO_LARGE and "decompressed" in result.error
    assert result.elapsed < 3.0
    assert peak < 8 * cap
    assert result.n_bytes < cap  # stopped long before the end of the compressed stream


def test_malformed_html_is_still_fetched(fetcher) -> None:
    result = fetcher.fetch(f"{BASE}/malformed.html")
    assert result.outcome is Outcome.OK and isinstance(result.text, str)


def test_links_page(fetcher) -> None:
    result = fetcher.fetch(f"{BASE}/links.html")
    assert result.outcome is Outcome.OK and "<a" in result.text.lower()


def test_unknown_host_is_the_proxys_502(fetcher) -> None:
    result = fetcher.fetch("http://no-such-host.test/")
    assert result.outcome is Outcome.HTTP_ERROR and result.status_code == 502


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "ftp://faults.test/x",
        "http:///path",
        "mailto:a@b.test",
        "",
        "faults.test/x",
        "http://faults.test:99999/",
        "http://faults.test/a\nb",
        "javascript:alert(1)",
    ],
)
def test_invalid_urls(fetcher, url) -> None:
    assert invalid_url_reason(url)
    result = fetcher.fetch(url)
    assert result.outcome is Outcome.INVALID_URL and result.error


def test_connection_refused_is_a_connection_error(no_env_proxy) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    fetcher = Fetcher(
        Settings(
            allow_private=True,
            connect_timeout=1,
            read_timeout=1,
            fetch_deadline=3,
            max_retries=1,
            retry_backoff=0.05,
        )
    )
    result = fetcher.fetch(f"http://127.0.0.1:{port}/")
    assert result.outcome is Outcome.CONNECTION_ERROR and result.error


def test_dns_failure_is_a_connection_error(no_env_proxy, monkeypatch) -> None:
    def getaddrinfo(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    fetcher = Fetcher(Settings(connect_timeout=1, read_timeout=1, fetch_deadline=3, max_retries=0))
    result = fetcher.fetch("http://dead-host.example/")
    assert result.outcome is Outcome.CONNECTION_ERROR
    assert "resolve" in result.error.lower() or "name" in result.error.lower()


def test_env_proxy_is_used(sandbox, monkeypatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", sandbox.proxy_url)
    fetcher = Fetcher(fast_settings(sandbox, proxy=""))
    assert fetcher.fetch(f"{BASE}/ok.html").outcome is Outcome.OK


def test_settings_proxy_overrides_env(sandbox, monkeypatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a dead proxy
    fetcher = Fetcher(fast_settings(sandbox))
    assert fetcher.fetch(f"{BASE}/ok.html").outcome is Outcome.OK


def test_concurrent_fetches(fetcher) -> None:
    results = []

    def fetch() -> None:
        results.append(fetcher.fetch(f"{BASE}/ok.html"))

    threads = [threading.Thread(target=fetch) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == 8 and all(r.outcome is Outcome.OK for r in results)


def test_fetch_robots_follows_redirects(fetcher) -> None:
    result = fetcher.fetch_robots("http://robots-redirect.test/robots.txt")
    assert result.outcome is Outcome.OK and "/blocked/" in result.text
    assert result.url == "http://robots-redirect.test/robots.txt"


def test_fetch_robots_reads_any_content_type(fetcher) -> None:
    result = fetcher.fetch_robots(f"{BASE}/robots.txt")
    assert result.outcome is Outcome.OK and "/private/" in result.text
    assert result.encoding == "utf-8"


def test_fetch_robots_redirect_loop(fetcher) -> None:
    result = fetcher.fetch_robots(f"{BASE}/redirect-loop/a")
    assert result.outcome is Outcome.TOO_MANY_REDIRECTS


def test_fetch_robots_redirect_to_internal_address(fetcher) -> None:
    assert fetcher.fetch_robots(f"{BASE}/redirect-metadata").outcome is Outcome.ADDRESS_REFUSED


def test_fetch_robots_truncates_at_500_kib(fetcher) -> None:
    result = fetcher.fetch_robots(f"{BASE}/huge-nolength.html")
    assert result.outcome is Outcome.OK and len(result.body) == ROBOTS_MAX_BYTES


def test_fetch_never_raises_on_garbage(fetcher) -> None:
    for url in (None, 42, "http://\udcff.test/", "http://" + "a" * 300 + ".test/"):
        result = fetcher.fetch(url)  # type: ignore[arg-type]
        assert result.outcome in (
            Outcome.INVALID_URL,
            Outcome.HTTP_ERROR,
            Outcome.CONNECTION_ERROR,
            Outcome.ERROR,
        )


@pytest.mark.parametrize("name", sorted(ENCODING_SAMPLES))
def test_encoding_pages_decode_correctly(fetcher, name) -> None:
    result = fetcher.fetch(f"{BASE}/enc/{name}")
    assert result.outcome is Outcome.OK, result.error
    assert ENCODING_SAMPLES[name] in result.text, (name, result.encoding)
    assert "\ufffd" not in result.text and not result.text.startswith("\ufeff")


def test_slow_headers_end_at_the_deadline_through_a_proxy(sandbox) -> None:
    """A server trickling its status line and headers cannot outlast ``fetch_deadline``
    (the read timeout alone restarts with every byte)."""
    fetcher = Fetcher(fast_settings(sandbox, read_timeout=10.0, fetch_deadline=2.0))
    started = time.monotonic()
    result = fetcher.fetch("http://s1.slow-headers.test/page/1.html")
    took = time.monotonic() - started
    assert result.outcome is Outcome.TIMEOUT, result
    assert "headers" in result.error
    assert took < 4.0


def test_slow_headers_end_at_the_deadline_on_a_direct_connection() -> None:
    stop = threading.Event()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def trickle() -> None:
            conn, _ = server.accept()
            with conn:
                for byte in b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n":
                    if stop.wait(0.5):
                        return
                    try:
                        conn.sendall(bytes((byte,)))
                    except OSError:
                        return

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        fetcher = Fetcher(Settings(allow_private=True, read_timeout=5.0, fetch_deadline=1.5))
        expired_before = WATCH.expired
        started = time.monotonic()
        result = fetcher.fetch(f"http://127.0.0.1:{port}/")
        took = time.monotonic() - started
        stop.set()
    assert result.outcome is Outcome.TIMEOUT, result
    assert took < 3.0
    assert WATCH.expired > expired_before


def test_robots_fetch_has_its_own_deadline(sandbox) -> None:
    fetcher = Fetcher(fast_settings(sandbox, read_timeout=30.0, fetch_deadline=30.0,
                                    robots_deadline=1.0))
    started = time.monotonic()
    result = fetcher.fetch_robots("http://h1.robots-hang.stall.test/robots.txt")
    assert result.outcome is Outcome.TIMEOUT
    assert time.monotonic() - started < 2.5
