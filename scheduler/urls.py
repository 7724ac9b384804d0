"""URL canonicalisation (docs/algorithms.md §2.4 (a)-(f)) and the URL features the scheduler needs.

Beyond the paper's (a)-(f), session ids are dropped, as Heritrix and Nutch do: a query parameter
named like one (``SESSION_PARAMETERS``) whose value looks like a token (16 or more letters,
digits, ``-`` or ``_``), and a ``;jsessionid=`` path parameter. Otherwise every link of a site
that puts a fresh session id in its URLs is a new page, a spider trap no depth or pattern rule
bounds well (measured on the sandbox: the default ``jlse`` crawl spent 283 of 2,000 fetches on
``/session/N.html?sid=...`` copies of five pages).

``canonicalize`` decides when two URLs name the same page, so every URL is canonical before it
reaches the frontier or the crawl database. It never raises: anything it cannot make into a
valid http(s) URL is ``None``. IRIs (non-ASCII hosts, paths, queries) are first made into URIs
by w3lib's ``safe_url_string``; the normalisation itself is done here because w3lib's
``canonicalize_url`` sorts the query (order can matter) and keeps invalid hosts.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
from urllib.parse import parse_qsl, urljoin, urlsplit

from publicsuffixlist import PublicSuffixList
from w3lib.url import safe_url_string

from jlse.models.link_index import url_tokens  # noqa: F401  (re-exported)
from jlse.scheduler.hosts import canonical_host

logger = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": 80, "https": 443}
INDEX_PAGES = ("index.html", "index.htm")
MAX_NETLOC_LENGTH = 1024  # host, port and user info
CACHED_URL_CHARS = 2048  # longer URLs are not kept in the canonicalisation cache

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SUB_DELIMS = "!$&'()*+,;="
_PATH_SAFE = frozenset(_UNRESERVED | set(_SUB_DELIMS) | set(":@/"))
_QUERY_SAFE = frozenset(_PATH_SAFE | set("?"))
# A valid escape, or a character that may have to be escaped (anything outside the safe sets).
_ESCAPE_OR_UNSAFE = re.compile(r"%[0-9A-Fa-f]{2}|[^A-Za-z0-9\-._~!$&'()*+,;=:@/?]")
_C0_OR_SPACE = "".join(chr(c) for c in range(0x21))
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_PORT = re.compile(r"[0-9]{1,5}")
SESSION_PARAMETERS = frozenset({"sid", "sessid", "sessionid", "session_id", "jsessionid",
                                "phpsessid", "aspsessionid"})
_SESSION_VALUE = re.compile(r"[0-9A-Za-z_-]{16,}")
_SESSION_HINT = re.compile(r"sid|sess", re.IGNORECASE)  # cheap test before splitting a query
_PATH_SESSION_ID = re.compile(r";jsessionid=[^/]*", re.IGNORECASE)


def canonicalize(url: str, base: str | None = None) -> str | None:
    """The canonical form of ``url`` (resolved against ``base``), or None if it is not a valid
    http(s) URL. Never raises; idempotent."""
    try:
        return _canonicalize(url, base)
    except Exception as exc:  # noqa: BLE001 - bad input must never crash the crawl
        logger.debug("cannot canonicalize %r (base %r): %s", url, base, exc)
        return None


def _canonicalize(url: str, base: str | None) -> str | None:
    if not isinstance(url, str):
        return None
    url = _preclean(url)
    if base:
        url = _join(_preclean(base), url)
    if len(url) > CACHED_URL_CHARS:
        return _canonical_absolute.__wrapped__(url)
    return _canonical_absolute(url)


@functools.lru_cache(maxsize=16384)  # site navigation links repeat on every page of a site
def _canonical_absolute(url: str) -> str | None:
    if not url.isascii():
        url = safe_url_string(_with_ascii_host(url))
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        return None
    if len(parts.netloc) > MAX_NETLOC_LENGTH:
        return None
    netloc = _canonical_netloc(parts.netloc, scheme)
    if netloc is None:
        return None
    path = _canonical_path(parts.path)
    query = _without_session_ids(_normalize_escapes(parts.query, _QUERY_SAFE))
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def _preclean(url: str) -> str:
    """What browsers do before parsing: trim controls and spaces, drop tabs and newlines, and
    read a backslash before the query as a slash."""
    url = url.strip(_C0_OR_SPACE)
    if "\t" in url or "\n" in url or "\r" in url:
        url = url.translate(_TAB_NEWLINE)
    if "\\" in url:
        cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
        url = url[:cut].replace("\\", "/") + url[cut:]
    return url


def _join(base: str, ref: str) -> str:
    """``ref`` resolved against ``base`` (RFC 3986 section 5.2, dot segments left for later).

    A fast path for the common reference shapes; ``urljoin`` handles the rest."""
    scheme_match = _SCHEME.match(ref)
    if scheme_match:
        end = scheme_match.end()
        if base[:end].lower() != ref[:end].lower() or ref.startswith("//", end):
            return ref
        return urljoin(base, ref)  # "http:page" relative to an http base
    scheme, origin, path, query = _split_base(base)
    if ref.startswith("//"):
        return f"{scheme}:{ref}"
    if ref.startswith("/"):
        return origin + ref
    if not ref or ref.startswith("#"):
        return origin + path + (f"?{query}" if query else "")
    if ref.startswith("?"):
        return origin + path + ref
    return origin + path[: path.rfind("/") + 1] + ref


@functools.lru_cache(maxsize=256)
def _split_base(base: str) -> tuple[str, str, str, str]:
    """Scheme, ``scheme://netloc``, path (at least "/") and query of a base URL."""
    parts = urlsplit(base)
    return parts.scheme, f"{parts.scheme}://{parts.netloc}", parts.path or "/", parts.query


@functools.lru_cache(maxsize=4096)
def _canonical_netloc(netloc: str, scheme: str) -> str | None:
    """Lower-case ``host[:port]`` without user info or default port; None if invalid."""
    hostport = netloc.rpartition("@")[2]
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            return None
        host = _canonical_ipv6(hostport[1:end])
        rest = hostport[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:]
    else:
        host_text, _, port_text = hostport.partition(":")
        host = canonical_host(host_text)
    if host is None:
        return None
    if not port_text:
        return host
    if not _PORT.fullmatch(port_text):
        return None
    port = int(port_text)
    if not 0 < port < 65536:
        return None
    return host if port == DEFAULT_PORTS[scheme] else f"{host}:{port}"


def canonical_netloc(netloc: str, scheme: str) -> str | None:
    """``host[:port]`` of an http(s) URL as ``canonicalize`` writes it (user info dropped,
    host by ``canonical_host``, default port dropped); None if invalid."""
    scheme = scheme.lower()
    if scheme not in DEFAULT_PORTS or len(netloc) > MAX_NETLOC_LENGTH:
        return None
    return _canonical_netloc(netloc, scheme)


def _canonical_ipv6(text: str) -> str | None:
    try:
        return f"[{ipaddress.IPv6Address(text).compressed}]"
    except ValueError:
        return None


def _with_ascii_host(url: str) -> str:
    """``url`` with its host made ASCII (UTS #46, non-transitional) before w3lib escapes the
    rest: w3lib's IDNA 2003 would make ``faß.de`` into ``fass.de``, browsers go to
    ``xn--fa-hia.de``. An invalid host is left for ``canonical_host`` to refuse."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if hostport.startswith("[") or hostport.isascii():
        return url
    host_text, colon, port = hostport.partition(":")
    host = canonical_host(host_text)
    if host is None:
        return url
    netloc = f"{userinfo}{at}{host}{colon}{port}"
    return parts._replace(netloc=netloc).geturl()


def _without_session_ids(query: str) -> str:
    """``query`` without its session-id parameters (module docstring); order kept."""
    if not query or not _SESSION_HINT.search(query):
        return query
    pairs = query.split("&")
    kept = [pair for pair in pairs if not _is_session_id(pair)]
    return query if len(kept) == len(pairs) else "&".join(kept)


def _is_session_id(pair: str) -> bool:
    name, _, value = pair.partition("=")
    return name.lower() in SESSION_PARAMETERS and _SESSION_VALUE.fullmatch(value) is not None


def _canonical_path(path: str) -> str:
    if ";" in path:
        path = _PATH_SESSION_ID.sub("", path)
    path = _normalize_escapes(path, _PATH_SAFE)
    if not path.startswith("/"):
        path = "/" + path
    path = remove_dot_segments(path)
    head, _, last = path.rpartition("/")
    if last.lower() in INDEX_PAGES:
        path = head + "/"
    return path


def _normalize_escapes(text: str, safe: frozenset[str]) -> str:
    """Decode escapes of unreserved characters, upper-case the others, escape unsafe characters
    (UTF-8) and a ``%`` that starts no escape."""
    if not text or not _ESCAPE_OR_UNSAFE.search(text):
        return text

    def fix(match: re.Match[str]) -> str:
        token = match.group()
        if len(token) == 3:
            char = chr(int(token[1:], 16))
            return char if char in _UNRESERVED else token.upper()
        if token in safe:
            return token
        return "".join(f"%{byte:02X}" for byte in token.encode("utf-8", "surrogatepass"))

    return _ESCAPE_OR_UNSAFE.sub(fix, text)


def remove_dot_segments(path: str) -> str:
    """Resolve ``.`` and ``..`` segments of an absolute path (RFC 3986, section 5.2.4)."""
    if "/." not in path:
        return path
    segments = path[1:].split("/")
    output: list[str] = []
    for segment in segments[:-1]:
        if segment == "..":
            if output:
                output.pop()
        elif segment != ".":
            output.append(segment)
    last = segments[-1]
    if last in (".", ".."):
        if last == ".." and output:
            output.pop()
        output.append("")
    else:
        output.append(last)
    return "/" + "/".join(output)


def host_of(url: str) -> str:
    """Lower-case ``host[:port]`` of a canonical URL, "" if it has none."""
    try:
        return urlsplit(url).netloc.rpartition("@")[2].lower()
    except ValueError:
        return ""


def home_page_url(url: str) -> str | None:
    """The home page of ``url``'s site (``scheme://host/``); None for a URL that is not
    http(s) or has no host."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}/"


def is_home_page(url: str) -> bool:
    """Whether ``url`` is a site's home page: path "/" (or none) and no query."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.path in ("", "/") and not parts.query


def hostname_of(host: str) -> str:
    """``host[:port]`` without the port (IPv6 brackets kept)."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.partition(":")[0]


_SUFFIXES = PublicSuffixList()  # the package's bundled list; never fetched


@functools.lru_cache(maxsize=65536)
def registered_domain(host: str) -> str:
    """The registered domain (eTLD+1, by the public-suffix list bundled with
    ``publicsuffixlist``) of a host: ``a.b.example.com`` -> ``example.com``,
    ``x.example.com.cn`` -> ``example.com.cn``, ``me.github.io`` -> ``me.github.io``. IP
    addresses, single labels and bare suffixes are returned as they are."""
    name = hostname_of(host.lower()).rstrip(".")
    if name.startswith("[") or _is_ipv4(name):
        return name
    return _SUFFIXES.privatesuffix(name) or name


def _is_ipv4(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


_ID_SEGMENT = re.compile(
    r"(?i)(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|(?=[a-f]*[0-9])[0-9a-f]{8,})(\.[a-z0-9]+)?"
)
_DIGITS = re.compile(r"[0-9]+")


def url_pattern(url: str) -> str:
    """The URL's shape: host + path with digit runs as ``9`` and id/hash segments as ``*``,
    then the sorted query keys. ``/p/12.html`` and ``/p/345.html`` share a pattern."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    segments = [_segment_pattern(segment) for segment in parts.path.split("/")]
    pattern = parts.netloc.rpartition("@")[2].lower() + "/".join(segments)
    keys = sorted({key for key, _ in parse_qsl(parts.query, keep_blank_values=True)})
    return pattern + ("?" + "&".join(keys) if keys else "")


def _segment_pattern(segment: str) -> str:
    match = _ID_SEGMENT.fullmatch(segment)
    if match:
        return "*" + (match.group(1) or "")
    return _DIGITS.sub("9", segment)


# url_tokens lives with the link index that uses it (models may not import scheduler).
