"""Reading the sandbox's served pages in tests: out-links, hosts, decoded text."""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import lxml.html
import requests

HREF = re.compile(r'href="([^"]*)"')


def links_of(web, url: str) -> list[str]:
    """Absolute out-links of a served page (hrefs are ASCII in every encoding we use)."""
    text = web.page_bytes(url).decode("latin-1")
    return [urljoin(url, html.unescape(href)) for href in HREF.findall(text)]


def host_of(url: str) -> str:
    return urlsplit(url).hostname or ""


def decoded(web, url: str) -> str:
    return web.page_bytes(url).decode(web.plan.by_host[host_of(url)].spec.encoding)


def links_in(page: bytes | str, base: str) -> list[str]:
    """Absolute hrefs of every ``<a>`` of an HTML page."""
    return [urljoin(base, href) for href in lxml.html.fromstring(page).xpath("//a/@href")]


@contextmanager
def proxied_session(server) -> Iterator[requests.Session]:
    """A requests session that reaches the sandbox through its proxy (and nothing else)."""
    session = requests.Session()
    session.trust_env = False
    session.proxies = {"http": server.proxy_url}
    try:
        yield session
    finally:
        session.close()


def offline_pip_env(cache: Path) -> dict[str, str]:
    """An environment where pip cannot reach any index (nothing listens on port 9)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env.update(JLSE_CACHE_DIR=str(cache), PIP_INDEX_URL="http://127.0.0.1:9/",
               PIP_RETRIES="0", PIP_CONFIG_FILE=os.devnull)
    return env
