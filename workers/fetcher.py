"""HTTP fetching: one URL per call, redirects handed back rather than followed, never raises.

Every call ends in a ``FetchResult`` whose ``outcome`` says what happened. Bodies are streamed
with a wire-byte cap and a decompressed-byte cap (gzip bombs); a deadline covers the whole
request, connection, headers and body (``workers.deadline``), so a server trickling its headers
cannot hold a fetch slot. Only HTML is read and decoded. Direct connections go through the
address guard (see ``workers.addrguard``); with a proxy, the proxy resolves names and only
literal addresses are checked.

A call is one request: a page that fails in a way worth retrying (``is_retryable``) goes back to
the frontier, which waits the host's delay before it is tried again (``retry_wait``), so a retry
is as polite as any request and holds no fetch slot while it waits.
"""

from __future__ import annotations

import email.utils
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
import urllib3.exceptions

from jlse.records import BODY_FAILED, Outcome
from jlse.scheduler.robots import robots_slots
from jlse.settings import Settings
from jlse.workers.addrguard import AddressGuard, AddressRefused, GuardedAdapter
from jlse.workers.charset import decode_html, looks_binary, sniffs_as_html
from jlse.workers.deadline import request_deadline, with_deadline

log = logging.getLogger(__name__)

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
ROBOTS_MAX_BYTES = 500 * 1024  # RFC 9309: parse at least 500 KiB; the rest is ignored
READ_CHUNK = 64 * 1024
DEADLINE_SLACK = 0.05  # seconds: a timeout this close to the deadline is the deadline's
ACCEPT = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5"
_QUIET_OUTCOMES = {Outcome.REDIRECT, Outcome.NOT_HTML, Outcome.HTTP_ERROR}  # logged at INFO


@dataclass
class FetchResult:
    url: str  # requested URL
    outcome: Outcome
    status_code: int | None = None
    content_type: str = ""  # media type only, lower-case, e.g. "text/html"
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # raw (decompressed) body; empty when not HTML or refused
    text: str | None = None  # decoded HTML, None unless outcome is OK
    encoding: str = ""  # codec used to decode
    redirect_to: str | None = None  # absolute target URL of a 3xx (never followed inline)
    n_bytes: int = 0  # bytes received on the wire
    elapsed: float = 0.0
    error: str = ""  # human-readable reason for non-OK outcomes
    retry_after: float | None = None  # seconds, when the server/robots says come back later
    reason: str = ""  # the status line's reason phrase (WARC records)
    http_version: str = ""  # e.g. "HTTP/1.1" (WARC records)
    request_headers: dict[str, str] = field(default_factory=dict)  # as sent (WARC records)
    warc: tuple[str, int, int] | None = None  # its response record: (file, offset, length)


@dataclass(frozen=True)
class _BodyPolicy:
    """How a body is read: caps, and whether hitting a cap truncates or fails the fetch."""

    max_wire_bytes: int
    max_decoded_bytes: int
    truncate: bool  # robots.txt: keep the first bytes; pages: TOO_LARGE
    html_only: bool  # pages: anything that is not HTML is NOT_HTML, unread


class _Abort(Exception):
    """Ends one fetch attempt with ``outcome``; turned into a FetchResult."""

    def __init__(self, outcome: Outcome, error: str, n_bytes: int = 0) -> None:
        super().__init__(error)
        self.outcome, self.error, self.n_bytes = outcome, error, n_bytes


class Fetcher:
    """Fetches pages and robots.txt files for the crawler; one instance is shared by threads."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.guard = AddressGuard(settings.allow_private, settings.allowed_networks)
        self._proxies = (
            {"http": settings.proxy, "https": settings.proxy} if settings.proxy else None
        )
        self._env_proxies: dict[str, dict[str, str]] = {}  # origin -> proxies from the environment
        self._session = _new_session(settings, self.guard)
        self._page_policy = _BodyPolicy(
            settings.max_bytes, settings.max_decompressed_bytes, truncate=False, html_only=True
        )
        self._robots_policy = _BodyPolicy(
            ROBOTS_MAX_BYTES, ROBOTS_MAX_BYTES, truncate=True, html_only=False
        )
        self._document_policy = _BodyPolicy(  # sitemaps: any type, the caps of a page
            settings.max_bytes, settings.max_decompressed_bytes, truncate=False, html_only=False
        )

    def fetch(self, url: str) -> FetchResult:
        """Fetch one page (one request). A 3xx is returned as REDIRECT with ``redirect_to``;
        never raises."""
        policy = self._page_policy
        return self._run(url, self.settings.fetch_deadline,
                         lambda deadline: self._attempt(url, deadline, policy))

    def fetch_robots(self, url: str) -> FetchResult:
        """Fetch a robots.txt within ``robots_deadline``, following up to ``max_redirects``
        redirects; never raises."""
        return self._run(url, self.settings.robots_deadline,
                         lambda deadline: self._fetch_robots_chain(url, deadline))

    def fetch_document(self, url: str) -> FetchResult:
        """Fetch a file of any type (a sitemap) with a page's byte caps (one request)."""
        policy = self._document_policy
        return self._run(url, self.settings.fetch_deadline,
                         lambda deadline: self._attempt(url, deadline, policy))

    def close(self) -> None:
        self._session.close()

    def _proxies_for(self, url: str) -> dict[str, str]:
        """``settings.proxy``, else HTTP(S)_PROXY / NO_PROXY as requests reads them.

        The session does not read the environment itself (``trust_env`` off): requests would
        rescan ``os.environ`` on every request, a third of the fetch CPU. Cached per origin."""
        if self._proxies is not None:
            return self._proxies
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        proxies = self._env_proxies.get(origin)
        if proxies is None:
            proxies = requests.utils.get_environ_proxies(url)
            if len(self._env_proxies) > 10_000:
                self._env_proxies.clear()
            self._env_proxies[origin] = proxies
        return proxies

    def _run(self, url: str, seconds: float, fetch: Callable[[float], FetchResult]
             ) -> FetchResult:
        started = time.monotonic()
        try:
            result = fetch(started + seconds)
        except Exception as exc:  # the crawl goes on whatever happens to one URL
            log.exception("unexpected error fetching %s", url)
            result = FetchResult(url, Outcome.ERROR, error=f"unexpected error: {exc!r}")
        result.url = url
        result.elapsed = time.monotonic() - started
        _log_outcome(result)
        return result

    def _fetch_robots_chain(self, url: str, deadline: float) -> FetchResult:
        current = url
        for _ in range(self.settings.max_redirects + 1):
            result = self._attempt(current, deadline, self._robots_policy)
            if result.outcome is not Outcome.REDIRECT or result.redirect_to is None:
                return result
            current = result.redirect_to
        error = f"more than {self.settings.max_redirects} redirects (last: {current})"
        return FetchResult(url, Outcome.TOO_MANY_REDIRECTS, error=error)

    def _attempt(self, url: str, deadline: float, policy: _BodyPolicy) -> FetchResult:
        try:
            return self._request(url, deadline, policy)
        except _Abort as abort:
            return FetchResult(url, abort.outcome, error=abort.error, n_bytes=abort.n_bytes)

    def _request(self, url: str, deadline: float, policy: _BodyPolicy) -> FetchResult:
        reason = invalid_url_reason(url)
        if reason:
            raise _Abort(Outcome.INVALID_URL, reason)
        try:  # the host every check saw (canonical) is the host requested: workers.addrguard
            target = self.guard.vet(url, self._proxies_for(url))
        except AddressRefused as exc:
            raise _Abort(Outcome.ADDRESS_REFUSED, str(exc)) from None
        except ValueError as exc:
            raise _Abort(Outcome.INVALID_URL, str(exc)) from None
        response = self._send(target, deadline)
        try:
            return self._read_response(url, response, deadline, policy)
        finally:
            response.close()

    def _send(self, url: str, deadline: float) -> requests.Response:
        started = time.monotonic()
        remaining = deadline - started
        if remaining <= 0:
            raise _Abort(
                Outcome.TIMEOUT, f"fetch deadline of {self.settings.fetch_deadline} s exceeded"
            )
        timeout = (
            min(self.settings.connect_timeout, remaining),
            min(self.settings.read_timeout, remaining),
        )
        try:
            with request_deadline(deadline):
                return self._session.get(
                    url, allow_redirects=False, stream=True, timeout=timeout,
                    proxies=self._proxies_for(url)
                )
        except AddressRefused as exc:
            raise _Abort(Outcome.ADDRESS_REFUSED, str(exc)) from None
        except requests.RequestException as exc:
            # the deadline watch shut the socket down, or a read timeout cut to the time left
            # ran out with it: either way the deadline ended the request
            if time.monotonic() >= deadline - DEADLINE_SLACK:
                raise _Abort(Outcome.TIMEOUT, f"fetch deadline of {deadline - started:.1f} s "
                             "exceeded before the response headers arrived") from None
            if isinstance(exc, requests.Timeout):
                raise _Abort(Outcome.TIMEOUT, f"timed out: {_root_cause(exc)}") from None
            raise _send_error(exc) from None
        except UnicodeError as exc:
            raise _Abort(Outcome.INVALID_URL, f"invalid URL: {exc}") from None

    def _read_response(
        self, url: str, response: requests.Response, deadline: float, policy: _BodyPolicy
    ) -> FetchResult:
        content_type_header = response.headers.get("Content-Type", "")
        result = FetchResult(
            url,
            Outcome.OK,
            status_code=response.status_code,
            content_type=_media_type(content_type_header),
            headers=dict(response.headers),
            retry_after=_retry_after(response.headers.get("Retry-After")),
            reason=response.reason or "",
            http_version="HTTP/1.0" if getattr(response.raw, "version", 11) == 10 else "HTTP/1.1",
            request_headers=dict(response.request.headers),
        )
        status = response.status_code
        if 300 <= status < 400:
            return _redirect(result, response.headers.get("Location"))
        if status >= 400:
            return _failed(
                result, Outcome.HTTP_ERROR, f"HTTP {status} {response.reason or ''}".strip()
            )
        if policy.html_only and result.content_type and result.content_type not in HTML_TYPES:
            return _failed(result, Outcome.NOT_HTML, f"content type {result.content_type}")
        declared = _content_length(response.headers.get("Content-Length"))
        if not policy.truncate and declared is not None and declared > policy.max_wire_bytes:
            error = f"Content-Length {declared} exceeds max_bytes {policy.max_wire_bytes}"
            return _failed(result, Outcome.TOO_LARGE, error)
        try:
            body, result.n_bytes = self._read_body(response, deadline, policy)
        except _Abort as abort:
            result.n_bytes = abort.n_bytes
            return _failed(result, abort.outcome, abort.error)
        if not policy.html_only:
            result.body, result.encoding = body, "utf-8"
            result.text = body.decode("utf-8", errors="replace").removeprefix("\ufeff")
            return result
        if not result.content_type and not sniffs_as_html(body):
            return _failed(result, Outcome.NOT_HTML, "no content type and the body is not HTML")
        if looks_binary(body):
            return _failed(result, Outcome.NOT_HTML, "binary body labelled as HTML")
        result.body = body
        result.text, result.encoding = decode_html(body, content_type_header)
        return result

    def _read_body(
        self, response: requests.Response, deadline: float, policy: _BodyPolicy
    ) -> tuple[bytes, int]:
        """The decoded body and the bytes read on the wire, within the policy's caps and deadline.

        ``read1`` returns whatever has arrived (a trickle cannot hold us past the deadline by
        more than one read timeout) and inflates at most READ_CHUNK bytes per call.
        """
        raw = response.raw
        chunks: list[bytes] = []
        n_decoded = 0
        while True:
            if time.monotonic() > deadline:
                error = f"fetch deadline of {self.settings.fetch_deadline} s exceeded"
                raise _Abort(Outcome.TIMEOUT, error, raw.tell())
            chunk = _read_chunk(raw)
            if not chunk:
                break
            chunks.append(chunk)
            n_decoded += len(chunk)
            over_cap = _over_cap(raw.tell(), n_decoded, policy)
            if over_cap and policy.truncate:
                break
            if over_cap:
                raise _Abort(Outcome.TOO_LARGE, over_cap, raw.tell())
        return b"".join(chunks)[: policy.max_decoded_bytes], raw.tell()


def invalid_url_reason(url: str) -> str | None:
    """Why ``url`` cannot be fetched as it is written, or None if it looks fetchable."""
    if not isinstance(url, str):
        return f"URL is a {type(url).__name__}, not a string"
    if not url:
        return "empty URL"
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in url):
        return "control character in URL"
    try:
        parts = urlsplit(url)
        host, _ = parts.hostname, parts.port
    except ValueError as exc:
        return f"malformed URL: {exc}"
    if parts.scheme.lower() not in ("http", "https"):
        return f"unsupported scheme {parts.scheme!r}" if parts.scheme else "no scheme"
    if not host:
        return "no host"
    return None


def is_retryable(result: FetchResult) -> bool:
    """A failure worth another request later: a server error or a network failure."""
    if result.outcome is Outcome.CONNECTION_ERROR:
        return True
    status = result.status_code
    return result.outcome is Outcome.HTTP_ERROR and status is not None and status >= 500


def retry_wait(settings: Settings, result: FetchResult, attempt: int) -> float:
    """Seconds before retry number ``attempt + 1``: the server's Retry-After, else exponential
    backoff; at most ``max_crawl_delay``. The frontier adds the host's own delay."""
    backoff = settings.retry_backoff * 2**attempt
    wait = result.retry_after if result.retry_after is not None else backoff
    return min(wait, settings.max_crawl_delay)


def _send_error(exc: requests.RequestException) -> _Abort:
    invalid = (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
               requests.exceptions.InvalidSchema)
    if isinstance(exc, invalid):
        return _Abort(Outcome.INVALID_URL, f"invalid URL: {exc}")
    return _Abort(Outcome.CONNECTION_ERROR, _root_cause(exc))


class _DeadlineAdapter(GuardedAdapter):
    """The guarded adapter whose connections, direct or through a proxy, wait for a response
    no longer than the fetch's deadline (``workers.deadline``)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        _add_deadlines(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        known = proxy in self.proxy_manager
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not known:
            _add_deadlines(manager)
        return manager


def _add_deadlines(manager: Any) -> None:
    manager.pool_classes_by_scheme = {
        scheme: type(f"Deadline{pool.__name__}", (pool,),
                     {"ConnectionCls": with_deadline(pool.ConnectionCls)})
        for scheme, pool in manager.pool_classes_by_scheme.items()
    }


class _Session(requests.Session):
    """3xx are the fetcher's (``_redirect``): requests would parse every Location even with
    redirects off, and raise out of ``get`` on a malformed one (``http://[::1``)."""

    def get_redirect_target(self, resp: requests.Response) -> None:
        return None


def _new_session(settings: Settings, guard: AddressGuard) -> requests.Session:
    session = _Session()
    session.trust_env = False  # proxies from the environment: Fetcher._proxies_for
    session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    session.headers["User-Agent"] = settings.user_agent
    session.headers["Accept"] = ACCEPT
    # connections kept per origin (a proxy is one origin): the embedded crawl's page and
    # robots.txt fetches at once, so none is dropped for want of room
    kept = settings.concurrency + robots_slots(settings, embedded=True)
    adapter = _DeadlineAdapter(guard, pool_maxsize=max(kept, 10))
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _read_chunk(raw: urllib3.HTTPResponse) -> bytes:
    try:
        return raw.read1(READ_CHUNK, decode_content=True)
    except urllib3.exceptions.ReadTimeoutError:
        raise _Abort(Outcome.TIMEOUT, "read timed out in the body", raw.tell()) from None
    except urllib3.exceptions.DecodeError as exc:
        raise _Abort(Outcome.ERROR, f"undecodable Content-Encoding: {exc}", raw.tell()) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise _Abort(Outcome.CONNECTION_ERROR, f"{BODY_FAILED}: {exc}", raw.tell()) from None


def _over_cap(n_wire: int, n_decoded: int, policy: _BodyPolicy) -> str:
    """Which byte cap the body has passed, or "" if none."""
    if n_wire > policy.max_wire_bytes:
        return f"body exceeds max_bytes ({policy.max_wire_bytes} bytes on the wire)"
    if n_decoded > policy.max_decoded_bytes:
        return f"decompressed body exceeds max_decompressed_bytes ({policy.max_decoded_bytes})"
    return ""


def _redirect(result: FetchResult, location: str | None) -> FetchResult:
    if not location:
        return _failed(result, Outcome.HTTP_ERROR, f"HTTP {result.status_code} without Location")
    try:
        location = location.encode("latin-1").decode("utf-8")  # requests decodes headers as latin-1
    except UnicodeError:
        pass
    try:
        result.redirect_to = urljoin(result.url, location.strip())
    except ValueError:
        return _failed(result, Outcome.BAD_REDIRECT, f"invalid Location {location!r}")
    return _failed(result, Outcome.REDIRECT, f"HTTP {result.status_code} to {result.redirect_to}")


def _failed(result: FetchResult, outcome: Outcome, error: str) -> FetchResult:
    result.outcome, result.error = outcome, error
    return result


def _media_type(content_type_header: str) -> str:
    return content_type_header.split(";", 1)[0].split(",", 1)[0].strip().lower()


def _content_length(value: str | None) -> int | None:
    try:
        length = int(value) if value is not None else None
    except ValueError:
        return None
    return length if length is not None and length >= 0 else None


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), None if unusable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None or when.tzinfo is None:
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _root_cause(exc: BaseException) -> str:
    """The innermost readable reason of a requests/urllib3 exception chain."""
    reason: BaseException = exc
    while True:
        inner = getattr(reason, "reason", None) or (reason.args[0] if reason.args else None)
        if not isinstance(inner, BaseException) or inner is reason:
            return str(reason) or type(reason).__name__
        reason = inner


def _log_outcome(result: FetchResult) -> None:
    if result.outcome is Outcome.OK:
        return
    level = logging.INFO if result.outcome in _QUIET_OUTCOMES else logging.WARNING
    log.log(level, "%s %s: %s", result.outcome.value, result.url, result.error)
