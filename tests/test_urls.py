"""URL canonicalisation (docs/algorithms.md §2.4 (a)-(f)) and URL features."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jlse.scheduler.urls import (
    canonical_host,
    canonicalize,
    host_of,
    registered_domain,
    url_pattern,
    url_tokens,
)

# --- the rules, one by one ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # (a) lower-case scheme and host, but not the path
        ("HTTP://WWW.Example.COM/Path/File.HTML", "http://www.example.com/Path/File.HTML"),
        ("HtTpS://Example.com/", "https://example.com/"),
        # (b) drop the fragment
        ("http://example.com/a#section-2", "http://example.com/a"),
        ("http://example.com/a?x=1#frag", "http://example.com/a?x=1"),
        ("http://example.com/#", "http://example.com/"),
        # (c) percent-encoding: unreserved decoded, reserved kept, hex upper-cased
        ("http://example.com/%7Euser/", "http://example.com/~user/"),
        ("http://example.com/%7euser/", "http://example.com/~user/"),
        ("http://example.com/%41%62%2D%5f", "http://example.com/Ab-_"),
        ("http://example.com/a%2fb%3f", "http://example.com/a%2Fb%3F"),
        ("http://example.com/a%2Fb", "http://example.com/a%2Fb"),
        ("http://example.com/%e4%b8%ad", "http://example.com/%E4%B8%AD"),
        ("http://example.com/a b", "http://example.com/a%20b"),
        ("http://example.com/100%", "http://example.com/100%25"),
        ("http://example.com/%zz", "http://example.com/%25zz"),
        ("http://example.com/中文", "http://example.com/%E4%B8%AD%E6%96%87"),
        ("http://example.com/s?q=%7e%3d", "http://example.com/s?q=~%3D"),
        # (d) default index pages at the end of the path
        ("http://example.com/index.html", "http://example.com/"),
        ("http://example.com/dir/index.htm", "http://example.com/dir/"),
        ("http://example.com/dir/INDEX.HTML?x=1", "http://example.com/dir/?x=1"),
        ("http://example.com/index.php", "http://example.com/index.php"),
        ("http://example.com/index.html/more", "http://example.com/index.html/more"),
        ("http://example.com/myindex.html", "http://example.com/myindex.html"),
        # (e) dot segments
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/../../a", "http://example.com/a"),
        ("http://example.com/a/b/..", "http://example.com/a/"),
        ("http://example.com/a/%2E%2E/b", "http://example.com/b"),
        # (f) default port
        ("http://example.com:80/", "http://example.com/"),
        ("https://example.com:443/", "https://example.com/"),
        ("http://example.com:443/", "http://example.com:443/"),
        ("http://example.com:8080/", "http://example.com:8080/"),
        ("http://example.com:080/", "http://example.com/"),
        ("http://example.com:/", "http://example.com/"),
        # empty path, query order, trailing "?"
        ("http://example.com", "http://example.com/"),
        ("http://example.com?b=2&a=1", "http://example.com/?b=2&a=1"),
        ("http://example.com/p?z=1&a=2&z=0", "http://example.com/p?z=1&a=2&z=0"),
        ("http://example.com/p?", "http://example.com/p"),
        # IDNA, IPv6, user info, trailing dot, whitespace, backslashes
        ("http://Bücher.de/", "http://xn--bcher-kva.de/"),
        ("http://例子.测试/", "http://xn--fsqu00a.xn--0zwm56d/"),
        ("http://[::0:1]:8080/x", "http://[::1]:8080/x"),
        ("http://user:secret@example.com/", "http://example.com/"),
        ("http://example.com./a", "http://example.com/a"),
        ("  http://example.com/a\n/b\t ", "http://example.com/a/b"),
        ("http://example.com\\a\\b?q=\\", "http://example.com/a/b?q=%5C"),
    ],
)
def test_canonical_form(url: str, expected: str) -> None:
    assert canonicalize(url) == expected


@pytest.mark.parametrize(
    "url, expected",
    [
        ("http://a.test/session/0.html?sid=029f9055846092d5", "http://a.test/session/0.html"),
        ("http://a.test/x?a=1&SID=029f9055846092d5&b=2", "http://a.test/x?a=1&b=2"),
        ("http://a.test/x?PHPSESSID=abcdefabcdefabcdefabcdef12&page=2", "http://a.test/x?page=2"),
        ("http://a.test/p;jsessionid=ABCDEF0123456789ABCDEF0123456789?x=1", "http://a.test/p?x=1"),
        ("http://a.test/p;JSESSIONID=a1b2/c", "http://a.test/p/c"),
        # not session ids: a short value (a story id), another name, a value that is no token
        ("http://a.test/x?sid=12", "http://a.test/x?sid=12"),
        ("http://a.test/x?session=abcdefabcdefabcdefab", "http://a.test/x?session=abcdefabcdefabcdefab"),
        ("http://a.test/x?sid=abc%20defabcdefabcdefab", "http://a.test/x?sid=abc%20defabcdefabcdefab"),
        ("http://a.test/x;v=1?q=sid", "http://a.test/x;v=1?q=sid"),
    ],
)
def test_session_ids_are_dropped(url: str, expected: str) -> None:
    assert canonicalize(url) == expected
    assert canonicalize(expected) == expected


@pytest.mark.parametrize(
    "url",
    [
        "javascript:void(0)",
        "JavaScript:alert(1)",
        "mailto:someone@example.com",
        "tel:+123456",
        "data:text/html,<p>x</p>",
        "ftp://example.com/file",
        "file:///etc/passwd",
        "about:blank",
        "http://",
        "http:///path",
        "http:page.html",
        "//example.com/no-scheme",
        "/relative/without/base",
        "http://example.com:99999/",
        "http://example.com:0/",
        "http://example.com:port/",
        "http://example.com:80:80/",
        "http://exa mple.com/",
        "http://exa<mple.com/",
        "http://example..com/",
        "http://.example.com/",
        "http://[::1/",
        "http://[not-ipv6]/",
        "http://" + "a" * 64 + ".com/",
        "http://" + ".".join(["abcdefghij"] * 30) + "/",
        "",
        "   ",
    ],
)
def test_invalid_urls_are_none(url: str) -> None:
    assert canonicalize(url) is None


def test_very_long_urls() -> None:
    long_path = "http://example.com/" + "a" * 100_000
    assert canonicalize(long_path) == long_path
    assert canonicalize(long_path) == long_path  # not served from the cache, same answer
    assert canonicalize("http://" + "u" * 5000 + "@example.com/") is None


def test_non_string_input_is_none() -> None:
    assert canonicalize(None) is None  # type: ignore[arg-type]
    assert canonicalize(b"http://example.com/") is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("g", "http://a.com/b/c/g"),
        ("./g", "http://a.com/b/c/g"),
        ("../g", "http://a.com/b/g"),
        ("../../../g", "http://a.com/g"),
        ("/g", "http://a.com/g"),
        ("//other.com/g", "http://other.com/g"),
        ("?y", "http://a.com/b/c/d?y"),
        ("#s", "http://a.com/b/c/d?q"),
        ("", "http://a.com/b/c/d?q"),
        ("g?y#s", "http://a.com/b/c/g?y"),
        ("index.html", "http://a.com/b/c/"),
        ("https://B.com:443/x", "https://b.com/x"),
        ("http:g", "http://a.com/b/c/g"),
        ("..\\x", "http://a.com/b/x"),
    ],
)
def test_resolve_against_base(ref: str, expected: str) -> None:
    assert canonicalize(ref, "http://a.com/b/c/d?q#f") == expected


def test_resolution_agrees_with_urljoin_on_rfc3986_examples() -> None:
    from urllib.parse import urljoin

    base = "http://a/b/c/d;p?q"
    refs = ["g:h", "g", "./g", "g/", "/g", "//g", "?y", "g?y", "#s", "g#s", ";x", "g;x", "",
            ".", "./", "..", "../", "../g", "../..", "../../", "../../g", "../../../../g",
            "/./g", "/../g", "g.", ".g", "g..", "..g", "./../g", "./g/.", "g/./h", "g/../h",
            "g;x=1/./y", "g;x=1/../y", "g?y/./x", "g?y/../x", "g#s/./x", "g#s/../x"]
    for ref in refs:
        assert canonicalize(ref, base) == canonicalize(urljoin(base, ref)), ref


def test_relative_url_against_invalid_base_is_none() -> None:
    assert canonicalize("page.html", "not a url") is None
    assert canonicalize("page.html", "mailto:x@y.com") is None
    assert canonicalize("http://ok.com/", "mailto:x@y.com") == "http://ok.com/"


def test_host_of() -> None:
    assert host_of("http://example.com:8080/a") == "example.com:8080"
    assert host_of("https://example.com/") == "example.com"
    assert host_of("http://[::1]:81/") == "[::1]:81"
    assert host_of("not a url") == ""


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("example.com", "example.com"),
        ("a.b.example.com", "example.com"),
        ("news.example.com.cn", "example.com.cn"),
        ("www.bbc.co.uk", "bbc.co.uk"),
        ("example.co.uk:8080", "example.co.uk"),
        ("www.sina.cn", "sina.cn"),
        ("localhost", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("a.example.test", "example.test"),
        ("Sub.Example.ORG", "example.org"),
    ],
)
def test_registered_domain(host: str, expected: str) -> None:
    assert registered_domain(host) == expected


def test_url_pattern_groups_siblings() -> None:
    assert url_pattern("http://h.com/p/12.html") == url_pattern("http://h.com/p/345.html")
    assert url_pattern("http://h.com/calendar/2024/05") == url_pattern(
        "http://h.com/calendar/2024/06"
    )
    assert url_pattern("http://h.com/c?month=5&year=2024") == url_pattern(
        "http://h.com/c?year=2025&month=6"
    )
    uuid_a = "550e8400-e29b-41d4-a716-446655440000"
    uuid_b = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
    assert url_pattern(f"http://h.com/i/{uuid_a}") == url_pattern(f"http://h.com/i/{uuid_b}")
    hashed = url_pattern("http://h.com/f/3fa9c2d1e4.jpg")
    assert hashed == url_pattern("http://h.com/f/d0be2dc4.jpg") == "h.com/f/*.jpg"


def test_url_pattern_separates_different_shapes() -> None:
    assert url_pattern("http://h.com/p/12.html") != url_pattern("http://h.com/q/12.html")
    assert url_pattern("http://h.com/p/12.html") != url_pattern("http://other.com/p/12.html")
    assert url_pattern("http://h.com/p?a=1") != url_pattern("http://h.com/p?b=1")
    assert url_pattern("http://h.com/about") != url_pattern("http://h.com/contact")
    assert url_pattern("http://h.com/p/12.html") == "h.com/p/9.html"


def test_url_tokens() -> None:
    url = "http://www.news.example.com.cn/Sports/2024/football-match_3.html?q=World+Cup"
    tokens = url_tokens(url)
    assert tokens == ["news", "example", "sports", "2024", "football", "match", "q", "world", "cup"]
    assert url_tokens("https://example.org/index.php?id=7") == ["example", "id"]
    assert url_tokens("http://h.com/%E4%B8%AD%E6%96%87/") == ["h", "中文"]
    assert url_tokens("not a url") == ["not", "a", "url"]


# --- fuzzing -----------------------------------------------------------------------------

_SCHEMES = st.sampled_from(["http", "HTTP", "https", "HtTpS", "ftp", "javascript", "mailto", ""])
_LABELS = st.one_of(
    st.from_regex(r"[A-Za-z0-9_-]{1,10}", fullmatch=True),
    st.sampled_from(["www", "Bücher", "例子", "测试", "xn--bcher-kva", "%41", "", "a b", "ß"]),
)
_HOSTS = st.one_of(
    st.lists(_LABELS, min_size=1, max_size=4).map(".".join),
    st.sampled_from(["127.0.0.1", "[::1]", "[::0:1]", "[fe80::1]", "[bad", "1.2.3.4."]),
    st.text(max_size=12),
)
_PORTS = st.one_of(
    st.just(""), st.just(":"), st.integers(0, 70000).map(lambda p: f":{p}"),
    st.sampled_from([":80", ":443", ":abc", ":080", ":８０"]),
)
_SEGMENTS = st.one_of(
    st.sampled_from([".", "..", "index.html", "INDEX.HTM", "%7E", "%7e", "%2F", "%2e", "%",
                     "%zz", "a b", "~user", "中文", "", "a%20b", "%25", ":", "@", "\\", ";p=1"]),
    st.text(max_size=6),
)
_PATHS = st.lists(_SEGMENTS, max_size=6).map(lambda segs: "/" + "/".join(segs))
_QUERIES = st.one_of(
    st.just(""), st.just("?"),
    st.lists(st.tuples(st.text(max_size=4), st.text(max_size=4)), max_size=4).map(
        lambda kvs: "?" + "&".join(f"{k}={v}" for k, v in kvs)
    ),
    st.text(max_size=10).map(lambda q: "?" + q),
)
_FRAGMENTS = st.one_of(st.just(""), st.text(max_size=8).map(lambda f: "#" + f))
_USERINFO = st.one_of(st.just(""), st.sampled_from(["user@", "u:p@", "a@b@"]))

URL_LIKE = st.builds(
    lambda s, u, h, port, p, q, f: f"{s}://{u}{h}{port}{p}{q}{f}",
    _SCHEMES, _USERINFO, _HOSTS, _PORTS, _PATHS, _QUERIES, _FRAGMENTS,
)
RELATIVE = st.one_of(
    _PATHS, _PATHS.map(lambda p: p.lstrip("/")), _QUERIES, _FRAGMENTS, st.text(max_size=20),
    st.builds(lambda h, p: f"//{h}{p}", _HOSTS, _PATHS),
)

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_canonical(result: str | None) -> None:
    if result is None:
        return
    assert result.startswith(("http://", "https://"))
    assert result.isascii()
    assert "#" not in result
    assert canonicalize(result) == result  # idempotent


@FUZZ
@given(st.text())
def test_fuzz_any_text(text: str) -> None:
    _check_canonical(canonicalize(text))


@FUZZ
@given(URL_LIKE)
def test_fuzz_url_like(url: str) -> None:
    _check_canonical(canonicalize(url))


@FUZZ
@given(RELATIVE, URL_LIKE)
def test_fuzz_relative_against_base(ref: str, base: str) -> None:
    _check_canonical(canonicalize(ref, base))
    _check_canonical(canonicalize(ref, "http://example.com/a/b/c.html?q=1"))


@FUZZ
@given(URL_LIKE)
def test_fuzz_features_never_raise(url: str) -> None:
    for candidate in (url, canonicalize(url) or "http://x.com/"):
        assert isinstance(url_pattern(candidate), str)
        assert all(token for token in url_tokens(candidate))
        assert isinstance(host_of(candidate), str)
        assert isinstance(registered_domain(host_of(candidate)), str)


# --- hosts as browsers and resolvers read them (issue 15) ---------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # UTS #46 non-transitional, as browsers: ß and ς are kept, not mapped to ss and σ
        ("http://faß.de/", "http://xn--fa-hia.de/"),
        ("http://FASS.de/", "http://fass.de/"),
        ("http://fa%C3%9F.de/", "http://xn--fa-hia.de/"),  # %-encoded UTF-8
        ("http://ＥＸＡＭＰＬＥ．com/", "http://example.com/"),  # full-width letters and dot
        # %-escapes in the host are decoded before any check
        ("http://%31%32%37.0.0.1/robots.txt", "http://127.0.0.1/robots.txt"),
        ("http://loc%61lhost:6379/", "http://localhost:6379/"),
        # numeric IPv4 forms (WHATWG URL's IPv4 parser)
        ("http://2130706433/", "http://127.0.0.1/"),
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("http://0177.0.0.1/", "http://127.0.0.1/"),
        ("http://127.1/", "http://127.0.0.1/"),
        ("http://0xA9.0xFE.0xA9.0xFE/latest/", "http://169.254.169.254/latest/"),
        ("http://1.2.3/", "http://1.2.0.3/"),
        ("http://0x/", "http://0.0.0.0/"),
    ],
)
def test_host_canonical_form(url: str, expected: str) -> None:
    assert canonicalize(url) == expected


@pytest.mark.parametrize(
    "url",
    ["http://1.2.3.256/", "http://1.2.3.4.5/", "http://4294967296/", "http://0x1g.1/",
     "http://09.1.1.1/", "http://a.b.1/", "http://%zz.com/", "http://%ff.com/",
     "http://a%2fb.com/", "http://a%40b.com/"],
)
def test_invalid_hosts_are_refused(url: str) -> None:
    assert canonicalize(url) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Bücher.DE.", "xn--bcher-kva.de"), ("faß.de", "xn--fa-hia.de"), ("%41.com", "a.com"),
     ("0x7f.0.0.1", "127.0.0.1"), ("", None), ("a..b", None)],
)
def test_canonical_host(text: str, expected: str | None) -> None:
    assert canonical_host(text) == expected

