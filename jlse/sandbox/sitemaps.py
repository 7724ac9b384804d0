"""``sitemaps.test``: a small site whose pages are found through its sitemaps, not its links.
No other sandbox site links to it, so crawls of the sandbox's topics never see it. Like
``faults.test`` its paths are an interface: the sitemap tests are written against them.

* ``/robots.txt``: ``Disallow: /private/``; ``Sitemap:`` lines for ``/sitemap-index.xml``,
  ``/sitemap.xml`` (relative: ``/sitemap.xml``), and one on another host (never read).
* ``/`` links to ``/pages/1.html`` only; ``/pages/N.html`` (1 <= N <= ``PAGES``) link home.
* ``/sitemap.xml``: a ``urlset`` of ``/pages/1-4.html``, ``/private/secret.html`` (disallowed),
  ``http://elsewhere.test/listed.html`` (out of scope when the crawl keeps to this host) and a
  repeat of ``/pages/1.html``.
* ``/sitemap-index.xml``: a ``sitemapindex`` of ``/sitemap-more.xml.gz`` (a gzipped file,
  ``application/gzip``), ``/sitemap-text.txt`` (plain text, sent with ``Content-Encoding:
  gzip``) and ``/sitemap-bomb.xml.gz`` (inflates to ``BOMB_BYTES``, past the default cap).
"""

from __future__ import annotations

import gzip
import re
from functools import lru_cache

from jlse.sandbox import response as r

HOST = "sitemaps.test"
PAGES = 12
BOMB_BYTES = 9 * 1024 * 1024  # past max_decompressed_bytes' default of 8 MiB
ROBOTS = (f"User-agent: *\nDisallow: /private/\n\nSitemap: http://{HOST}/sitemap-index.xml\n"
          "Sitemap: /sitemap.xml\nSitemap: http://elsewhere.test/sitemap.xml\n")
NS = "http://www.sitemaps.org/schemas/sitemap/0.9"

_PAGE = re.compile(r"/pages/(\d{1,3})\.html")


def serves(host: str) -> bool:
    return host == HOST


def robots_rules(host: str) -> str | None:
    return ROBOTS if host == HOST else None


def respond(path: str) -> r.Response:
    """The answer to ``GET http://sitemaps.test<path>``."""
    if path == "/robots.txt":
        return r.plain(200, ROBOTS)
    if path == "/":
        return _page("Sitemap test site", '<a href="/pages/1.html">the first page</a>')
    match = _PAGE.fullmatch(path)
    if match and 1 <= int(match.group(1)) <= PAGES:
        return _page(f"Listed page {match.group(1)}", '<a href="/">home</a>')
    if path == "/private/secret.html":
        return _page("Secret", "robots.txt keeps crawlers away")
    answer = _SITEMAPS.get(path)
    return answer() if answer else r.not_found()


def listed_pages() -> list[str]:
    """Every page URL of this host that a sitemap lists (and robots.txt allows)."""
    return [f"http://{HOST}/pages/{n}.html" for n in range(1, PAGES + 1)]


def _page(title: str, body: str) -> r.Response:
    html = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body><h1>{title}</h1><p>{body}</p></body></html>\n")
    return r.Response(200, html.encode("utf-8"))


def _urlset(urls: list[str]) -> bytes:
    items = "".join(f"<url><loc>{url}</loc><changefreq>daily</changefreq></url>" for url in urls)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{NS}">{items}</urlset>\n'
            ).encode()


def _plain_sitemap() -> r.Response:
    urls = [f"http://{HOST}/pages/{n}.html" for n in (1, 2, 3, 4)]
    urls += [f"http://{HOST}/private/secret.html", "http://elsewhere.test/listed.html", urls[0]]
    return r.Response(200, _urlset(urls), "application/xml")


def _index() -> r.Response:
    items = "".join(f"<sitemap><loc>http://{HOST}{path}</loc></sitemap>"
                    for path in ("/sitemap-more.xml.gz", "/sitemap-text.txt",
                                 "/sitemap-bomb.xml.gz"))
    body = f'<?xml version="1.0"?>\n<sitemapindex xmlns="{NS}">{items}</sitemapindex>\n'
    return r.Response(200, body.encode("utf-8"), "application/xml")


def _gzipped() -> r.Response:
    urls = [f"http://{HOST}/pages/{n}.html" for n in range(5, 10)]
    return r.Response(200, gzip.compress(_urlset(urls), mtime=0), "application/gzip")


def _text() -> r.Response:
    lines = "".join(f"http://{HOST}/pages/{n}.html\n" for n in range(10, PAGES + 1))
    response = r.Response(200, gzip.compress(lines.encode(), mtime=0), "text/plain")
    response.headers.append(("Content-Encoding", "gzip"))
    return response


@lru_cache(maxsize=1)
def _bomb_bytes() -> bytes:
    head = _urlset([f"http://{HOST}/bomb/1.html"])[:-len(b"</urlset>\n")]
    return gzip.compress(head + b" " * BOMB_BYTES + b"</urlset>\n", mtime=0)


def _bomb() -> r.Response:
    return r.Response(200, _bomb_bytes(), "application/gzip")


_SITEMAPS = {"/sitemap.xml": _plain_sitemap, "/sitemap-index.xml": _index,
             "/sitemap-more.xml.gz": _gzipped, "/sitemap-text.txt": _text,
             "/sitemap-bomb.xml.gz": _bomb}
