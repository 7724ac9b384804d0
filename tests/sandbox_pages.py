"""Reading the sandbox's served pages in tests: out-links, hosts, decoded text."""

from __future__ import annotations

import html
import re
from urllib.parse import urljoin, urlsplit

HREF = re.compile(r'href="([^"]*)"')


def links_of(web, url: str) -> list[str]:
    """Absolute out-links of a served page (hrefs are ASCII in every encoding we use)."""
    text = web.page_bytes(url).decode("latin-1")
    return [urljoin(url, html.unescape(href)) for href in HREF.findall(text)]


def host_of(url: str) -> str:
    return urlsplit(url).hostname or ""


def decoded(web, url: str) -> str:
    return web.page_bytes(url).decode(web.plan.by_host[host_of(url)].spec.encoding)
