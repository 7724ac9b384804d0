"""What a content site serves besides its pages: robots.txt, spider traps, redirects, broken,
slow and hanging pages, and images. These routes exist on every site; the site's features decide
which of them its pages link to.
"""

from __future__ import annotations

import hashlib
import random
import re

from jlse.sandbox import response as r
from jlse.sandbox.generator import SitePlan, WebPlan
from jlse.sandbox.layout import a, declared_meta, document, encode, esc, paras, ul
from jlse.sandbox.layout import content_type as site_content_type
from jlse.sandbox.sites import SiteSpec
from jlse.sandbox.text import TextGen
from jlse.sandbox.vocab import NEWS

SLOW_SECONDS = 2.0
HANG_SECONDS = 60.0
TRAP_PREFIXES = ("/calendar/", "/tree/", "/session/")

_CALENDAR = re.compile(r"/calendar/(\d{1,9})/(\d{2})")
_TREE = re.compile(r"/tree/(?:[ab]/)*")
_SESSION = re.compile(r"/session/([0-4])\.html")
_GO = re.compile(r"/go/(\d+)")
_CHAIN = re.compile(r"/r/([1-3])/(\d+)")
_ERROR = re.compile(r"/error/\d+\.html")

_DISALLOWED = "Disallow: /admin/\nDisallow: /print/\n"


def robots_text(spec: SiteSpec) -> str | None:
    """The robots.txt a site serves, or None when it answers 404/500 instead."""
    if spec.robots in ("404", "500"):
        return None
    if spec.robots == "crawl-delay":
        return "User-agent: *\nCrawl-delay: 1\n" + _DISALLOWED
    if spec.robots == "jlse-blocked":
        return "User-agent: jlse\nDisallow: /\n\nUser-agent: *\n" + _DISALLOWED
    return "User-agent: *\n" + _DISALLOWED


def robots_response(spec: SiteSpec) -> r.Response:
    if spec.robots == "500":
        return r.plain(500, "robots.txt: internal server error")
    text = robots_text(spec)
    return r.not_found() if text is None else r.plain(200, text)


def is_trap_path(path: str) -> bool:
    return path.startswith(TRAP_PREFIXES)


def _page(plan: SitePlan, title: str, links: list[str], seed_text: str) -> r.Response:
    """A trap page: a little generic text and the links that lead on forever."""
    rng = random.Random(seed_text)
    words = plan.language.topics.get(NEWS, plan.words)
    text = TextGen(plan.language, words, rng).paragraph(3)
    body = f"<h1>{esc(title)}</h1>{paras([text])}{ul(links)}<p>{a('/', plan.spec.name)}</p>"
    html = document(plan.language.code, title, declared_meta(plan.spec), body)
    return r.Response(200, encode(plan.spec, html), site_content_type(plan.spec))


def _calendar(plan: SitePlan, year: int, month: int) -> r.Response:
    ui = plan.language.ui
    prev_y, prev_m = (year, month - 1) if month > 1 else (year - 1, 12)
    next_y, next_m = (year, month + 1) if month < 12 else (year + 1, 1)
    links = [a(f"/calendar/{next_y}/{next_m:02d}", ui["month_next"])]
    if prev_y >= 1:
        links.insert(0, a(f"/calendar/{prev_y}/{prev_m:02d}", ui["month_prev"]))
    title = ui["calendar_title"].format(month=f"{year}-{month:02d}")
    return _page(plan, title, links, f"calendar|{plan.host}|{year}|{month}")


def _tree(plan: SitePlan, path: str) -> r.Response:
    ui = plan.language.ui
    links = [a("a/", f'{ui["docs"]} A'), a("b/", f'{ui["docs"]} B'), a("../", ui["prev"])]
    return _page(plan, f'{ui["docs"]} {path}', links, f"tree|{plan.host}|{path}")


def _session(plan: SitePlan, number: int, path_qs: str) -> r.Response:
    """Every link carries a fresh session id, so the same five pages have endless URLs."""
    links = []
    for k in range(5):
        sid = hashlib.sha1(f"{plan.host}|{path_qs}|{k}".encode()).hexdigest()[:16]
        links.append(a(f"/session/{k}.html?sid={sid}", f'{plan.language.ui["members"]} {k}'))
    return _page(plan, f'{plan.language.ui["members"]} {number}', links,
                 f"session|{plan.host}|{number}")


def _redirect(plan: SitePlan, path: str) -> r.Response | None:
    if match := _GO.fullmatch(path):
        item_id = int(match.group(1))
        return r.redirect(301, plan.detail_url(item_id)) if item_id in plan.items else None
    if match := _CHAIN.fullmatch(path):
        hops, item_id = int(match.group(1)), int(match.group(2))
        if item_id not in plan.items:
            return None
        if hops > 1:
            return r.redirect(302, f"/r/{hops - 1}/{item_id}")
        return r.redirect(301, plan.detail_url(item_id))
    if path in ("/loop/a", "/loop/b"):
        return r.redirect(302, "/loop/b" if path == "/loop/a" else "/loop/a")
    return None


def special_route(web: WebPlan, plan: SitePlan, path: str, path_qs: str) -> r.Response | None:
    """The answer for a non-page path of a content site, or None (then it is a 404)."""
    if path == "/robots.txt":
        return robots_response(plan.spec)
    if match := _CALENDAR.fullmatch(path):
        year, month = int(match.group(1)), int(match.group(2))
        return _calendar(plan, year, month) if year >= 1 and 1 <= month <= 12 else None
    if _TREE.fullmatch(path):
        return _tree(plan, path)
    if match := _SESSION.fullmatch(path):
        return _session(plan, int(match.group(1)), path_qs)
    if path.startswith(("/go/", "/r/", "/loop/")):
        return _redirect(plan, path)
    if _ERROR.fullmatch(path):
        return r.html(500, plan.language.ui["server_error"])
    if path == "/slow.html":
        return r.html(200, plan.language.ui["slow"], plan.spec.name, delay=SLOW_SECONDS)
    if path == "/hang.html":
        return r.html(200, plan.language.ui["slow"], plan.spec.name, delay=HANG_SECONDS)
    if path.startswith("/static/") and path.endswith(".png"):
        return r.image()
    return None
