"""HTML of the newswire web: home, category, article, print, about, topic-index, headline-stream
and live pages.

Every page carries a menu of the site's categories and a footer linking the two aggregators;
article pages carry the story, "more on this" links to their own site and, inside the text,
mentions of stories on peer sites (some through ``/s/ID`` short links that redirect, a few
"earlier reports" that are gone: 404).
"""

from __future__ import annotations

import datetime

from jlse.sandbox.layout import a, document, esc, ul
from jlse.sandbox.newswire.corpus import TOPICS
from jlse.sandbox.newswire.plan import (
    AGGREGATORS,
    INDEX_HOST,
    PAGE_SIZE,
    PAPERS_PATH,
    SLOW_HOST,
    SLOW_PATH,
    STREAM_HOST,
    STREAM_PAGES,
    STREAM_SIZE,
    TOPIC_NAMES,
    Page,
    SitePlan,
    WirePlan,
    age,
)
from jlse.sandbox.newswire.render_copy import copy_paragraphs, is_copy, title_on
from jlse.sandbox.realweb.render import FAULT_LINKS, paragraph_texts

HEAD_META = '<meta charset="utf-8">'
LATEST = 12
SHORT_LINK_EVERY = 6  # one mention in six goes through a /s/ID short link (301)
PARTNER_STORIES = 6  # newest stories shown under a partner with its stories
GONE_EVERY = 25  # one article in 25 cites an earlier report that is gone (404)
INTRO = {
    "outlet": "Business and economic news from around the world, as it happens.",
    "desk": "Specialist coverage of {topic}: prices, supply, policy and the companies involved.",
    "corporate": "Company announcements: quarterly results, dividends, mergers and takeovers.",
    "aggregator": "The day's business news from every newsroom on the wire, in one place.",
    "regional": "Local and world business news, every morning.",
    "journal": "The trade journal of {topic}: prices, supply, policy and the companies involved.",
    "blog": "Notes on the day's business news.",
    "portal": "Company results, deals and dividends for the private investor.",
}


def posted(seed: int, doc_id: int) -> str:
    """The date a story shows (1987; younger stories come first in their categories)."""
    days = int(age(seed, doc_id) * 230)
    return (datetime.date(1987, 10, 20) - datetime.timedelta(days=days)).isoformat()


def _intro(plan: SitePlan) -> str:
    topic = TOPIC_NAMES.get(plan.site.topic, "").lower()
    return INTRO[plan.site.kind].format(topic=topic)


def _frame(web: WirePlan, plan: SitePlan, title: str, main: str) -> str:
    links = [a("/", "Home")] + [a(plan.category_path(i), c.label)
                                for i, c in enumerate(plan.sections)]
    if plan.host == INDEX_HOST:
        links += [a(f"/topic/{topic}.html", TOPIC_NAMES[topic]) for topic in TOPICS]
    if plan.host == STREAM_HOST:
        links.append(a("/latest/", "Latest"))
    links.append(a("/about.html", "About"))
    header = (f'<div id="header"><h2 class="logo">{a("/", plan.site.name)}</h2>'
              f'{ul(links, "nav")}</div>')
    network = [a(f"http://{host}/", name) for host, name in AGGREGATORS if host != plan.host]
    footer = (f'<div id="footer"><h4>On the wire</h4>{ul(network, "network")}'
              f"<p>&copy; 1987 {esc(plan.site.name)}.</p></div>")
    body = f'{header}\n<div id="main">{main}</div>\n{_partners(web, plan)}{footer}'
    return document("en", title, HEAD_META, body, f"{plan.site.name}: {_intro(plan)}")


def _partners(web: WirePlan, plan: SitePlan) -> str:
    """The site's partner blocks (``links.partner_blocks``): home pages, some with their
    newest stories."""
    parts = []
    for heading, hosts, with_stories in web.partners.get(plan.host, ()):
        items = []
        for host in hosts:
            other = web.by_host[host]
            items.append(a(other.url("/"), other.site.name))
            if with_stories:
                items += [a(web.copy_url(host, d), title_on(other, web.docs[d]))
                          for d in web.newest_on(host, PARTNER_STORIES)]
        parts.append(f"<h4>{esc(heading)}</h4>{ul(items, 'partners')}")
    return f'<div id="sidebar">{"".join(parts)}</div>\n' if parts else ""


def _item(web: WirePlan, doc_id: int, plan: SitePlan | None = None, teaser: int = 0) -> str:
    """A story's link (site-relative when ``plan`` carries it, else its original), date and
    optional teaser."""
    doc = web.docs[doc_id]
    href = plan.article_path(doc_id) if plan is not None else web.article_url(doc_id)
    title = doc.title if plan is None else title_on(plan, doc)
    source = "" if plan is not None else f" - {esc(web.host_of[doc_id].site.name)}"
    words = doc.text.split()[len(doc.title.split()):][:teaser]
    text = f"<p>{esc(' '.join(words))} ...</p>" if words else ""
    return (f'{a(href, title)} <span class="meta">{posted(web.seed, doc_id)}{source}</span>'
            + text)


def _home(web: WirePlan, plan: SitePlan) -> tuple[str, str]:
    site = plan.site
    parts = [f"<h1>{esc(site.name)}</h1><p>{esc(_intro(plan))}</p>"]
    if site.host == INDEX_HOST:
        topics = [a(f"/topic/{t}.html", TOPIC_NAMES[t]) for t in TOPICS]
        checking = [a(url, url.removeprefix("http://")) for url in FAULT_LINKS[0]]
        parts += [f'<h2>Topics</h2>{ul(topics, "topics")}',
                  f'<p>{a(PAPERS_PATH, "Regional papers on the wire")}</p>',
                  f"<h3>Links we are checking</h3>{ul(checking)}"]
    elif site.host == STREAM_HOST:
        parts.append(f'<h2>Just in</h2>{ul([_item(web, d) for d in web.newest(LATEST)], "latest")}'
                     f'{a("/latest/", "All the latest headlines", "more")}')
    else:
        newest = sorted((d for c in plan.sections for d in c.docs[:LATEST]),
                        key=lambda d: (age(web.seed, d), d))[:LATEST]
        parts.append(f'<h2>Latest</h2>{ul([_item(web, d, plan, 20) for d in newest], "latest")}')
        for index, category in enumerate(plan.sections):
            top = [_item(web, d, plan) for d in category.docs[:3]]
            parts.append(f"<h3>{a(plan.category_path(index), category.label)}</h3>{ul(top)}"
                         f'{a(plan.category_path(index), "More " + category.label, "more")}')
        if site.host == SLOW_HOST:
            parts.append(f'<p>{a(SLOW_PATH, "Live markets ticker")}</p>')
    return site.name, "".join(parts)


def _pager(paths: list[str], number: int) -> str:
    links = [a(paths[number - 2], "Previous")] if number > 1 else []
    links += [a(path, str(n)) for n, path in enumerate(paths, start=1)]
    if number < len(paths):
        links.append(a(paths[number], "Next", "next"))
    return f'<div class="pager">{" ".join(links)}</div>'


def _category(web: WirePlan, plan: SitePlan, page: Page) -> tuple[str, str]:
    category = plan.sections[page.key]
    chunk = category.docs[(page.number - 1) * PAGE_SIZE: page.number * PAGE_SIZE]
    paths = [plan.category_path(page.key, n) for n in range(1, category.n_pages() + 1)]
    title = category.label if page.number == 1 else f"{category.label} - page {page.number}"
    main = (f'<div class="breadcrumb">{a("/", "Home")} &gt; {esc(category.label)}</div>'
            f"<h1>{esc(title)}</h1>" + ul([_item(web, d, plan, 25) for d in chunk], "stories")
            + _pager(paths, page.number))
    return f"{title} - {plan.site.name}", main


def _mention(web: WirePlan, host: str, doc_id: int, number: int) -> str:
    other = web.by_host[host]
    href = (other.url(f"/s/{doc_id}") if number % SHORT_LINK_EVERY == 0
            else web.copy_url(host, doc_id))
    return f" As {esc(other.site.name)} reported, {a(href, title_on(other, web.docs[doc_id]))}."


def _story(web: WirePlan, plan: SitePlan, doc_id: int) -> tuple[list[str], list[str]]:
    """(escaped paragraphs of the story with its mentions, escaped lines after it)."""
    doc = web.docs[doc_id]
    if is_copy(plan):
        texts, after = copy_paragraphs(plan, doc)
        original = web.host_of[doc_id]
        credit = "Read the full story at" if plan.site.kind == "blog" else "Originally published by"
        after = [esc(text) for text in after] + [
            f"{credit} {a(web.article_url(doc_id), original.site.name)}."]
    else:
        texts, after = paragraph_texts(doc.text, doc.id), []
    texts = [esc(text) for text in texts]
    _, mentioned = web.neighbours.get((plan.host, doc_id), ((), ()))
    for n, (host, other) in enumerate(mentioned):  # into the first paragraphs, one each
        texts[min(n, len(texts) - 1)] += _mention(web, host, other, doc_id + n)
    if doc_id % GONE_EVERY == 0:
        texts[-1] += f' See also {a(f"/archive/{doc_id}.html", "our earlier report")}.'
    return texts, after


def _article(web: WirePlan, plan: SitePlan, page: Page) -> tuple[str, str]:
    doc, index = web.docs[page.key], plan.section_of[page.key]
    category = plan.sections[index]
    own, _ = web.neighbours.get((plan.host, page.key), ((), ()))
    texts, after = _story(web, plan, page.key)
    title = title_on(plan, doc)
    more = [a(plan.article_path(d), title_on(plan, web.docs[d])) for d in own]
    tools = "" if is_copy(plan) else \
        f'<div class="tools">{a(f"/print/{doc.id}.html", "Print")}</div>'
    main = (f'<div class="breadcrumb">{a("/", "Home")} &gt; '
            f"{a(plan.category_path(index, plan.page_of(page.key)), category.label)}</div>"
            f'<h1>{esc(title)}</h1><p class="meta">{posted(web.seed, doc.id)}, '
            f'{esc(category.label)}</p><div class="article">'
            + "".join(f"<p>{text}</p>" for text in texts) + "</div>"
            + "".join(f'<p class="note">{text}</p>' for text in after)
            + (f'<h3>More on this</h3>{ul(more, "more")}' if more else "") + tools)
    return f"{title} - {plan.site.name}", main


def _print(web: WirePlan, page: Page) -> tuple[str, str]:
    doc = web.docs[page.key]
    body = "".join(f"<p>{esc(text)}</p>" for text in paragraph_texts(doc.text, doc.id))
    return doc.title, f"<h1>{esc(doc.title)}</h1>{body}"


def _topic(web: WirePlan, page: Page) -> tuple[str, str]:
    topic = TOPICS[page.key]
    entries = [a(p.url("/"), p.site.name) for p in web.desks(topic)]
    for outlet in web.of_kind("outlet") + web.of_kind("corporate"):
        at = [i for i, c in enumerate(outlet.sections) if c.slug == topic]
        if at:
            entries.append(a(outlet.url(outlet.category_path(at[0])),
                             f"{outlet.site.name}: {TOPIC_NAMES[topic]}"))
    latest = [_item(web, d) for d in web.newest(8, topic)]
    main = (f"<h1>{esc(TOPIC_NAMES[topic])}</h1><h2>Where to read about it</h2>"
            f'{ul(entries, "sites")}<h2>Latest</h2>{ul(latest, "latest")}')
    return f"{TOPIC_NAMES[topic]} - News Index", main


def _stream(web: WirePlan, page: Page) -> tuple[str, str]:
    newest = web.newest(STREAM_PAGES * STREAM_SIZE)
    chunk = newest[(page.number - 1) * STREAM_SIZE: page.number * STREAM_SIZE]
    paths = ["/latest/" + ("" if n == 1 else f"?p={n}") for n in range(1, STREAM_PAGES + 1)]
    main = (f"<h1>Latest headlines - page {page.number}</h1>"
            + ul([_item(web, d) for d in chunk], "stories") + _pager(paths, page.number))
    return f"Latest headlines - page {page.number}", main


def _papers(web: WirePlan) -> tuple[str, str]:
    papers = [a(p.url("/"), p.site.name) for p in web.of_kind("regional")]
    return "Regional papers - News Index", (f"<h1>Regional papers on the wire</h1>"
                                            f'{ul(papers, "sites")}')


def _about(plan: SitePlan) -> tuple[str, str]:
    site = plan.site
    n_stories = sum(len(c.docs) for c in plan.sections)
    text = (f"{site.name} is an independent newsroom. {_intro(plan)}"
            + (f" It keeps {n_stories} stories in {len(plan.sections)} categories."
               if n_stories else ""))
    return f"About {site.name}", (f"<h1>About {esc(site.name)}</h1><p>{esc(text)}</p>"
                                  f"<p>Contact: newsdesk@{esc(site.host)}</p>")


def render_page(web: WirePlan, plan: SitePlan, page: Page) -> str:
    """The HTML text of one page."""
    if page.kind == "home":
        title, main = _home(web, plan)
    elif page.kind == "category":
        title, main = _category(web, plan, page)
    elif page.kind == "article":
        title, main = _article(web, plan, page)
    elif page.kind == "print":
        title, main = _print(web, page)
    elif page.kind == "topic":
        title, main = _topic(web, page)
    elif page.kind == "papers":
        title, main = _papers(web)
    elif page.kind == "stream":
        title, main = _stream(web, page)
    elif page.kind == "live":
        ticker = [_item(web, d) for d in web.newest(20)]
        title, main = "Live markets", f"<h1>Live markets</h1>{ul(ticker, 'ticker')}"
    else:
        title, main = _about(plan)
    return _frame(web, plan, title, main)
