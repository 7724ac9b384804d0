"""HTML of the real-text web: home, section, article, about, directory and advert pages.

Every page carries a navigation menu, two adverts (``adnet.real``) and a footer of partner
sites; article pages carry the post's text and its text-neighbour links, section pages many
title links and little text.
"""

from __future__ import annotations

import datetime
import random

from jlse.sandbox.layout import a, document, esc, ul
from jlse.sandbox.realweb.corpus import TOPICS
from jlse.sandbox.realweb.plan import (
    ADS_HOST,
    N_OFFERS,
    PAGE_SIZE,
    TOPIC_NAMES,
    Page,
    RealPlan,
    SitePlan,
)

HEAD_META = '<meta charset="utf-8">'
MAX_WORDS = 2000  # of an article's body; longer posts (FAQs) are cut
LATEST = 10
INTRO = {
    "comp": "Questions and answers about computers: graphics, PC and Mac hardware, MS Windows "
            "and the X Window System.",
    "rec": "Cars, motorcycles, baseball and hockey: news, opinions and advice from fans and "
           "riders.",
    "sci": "Science discussions: cryptography, electronics, medicine and space exploration.",
    "politics": "Political debate: gun control, the Middle East and current affairs.",
    "religion": "Faith and its critics: Christianity, atheism and religion in general.",
    "forsale": "Buy and sell: computers, electronics, cars, tickets and more, from private "
               "sellers.",
    "hub": "News and discussion from across the net: computing, recreation, science, politics, "
           "religion and the marketplace.",
}
OFFERS = (
    ("Web hosting from $5 a month", "Fast, reliable hosting for your home page."),
    ("Cheap flights to anywhere", "Compare fares from hundreds of airlines."),
    ("Lose weight the easy way", "Our members lost 20 pounds in a month."),
    ("Win a holiday for two", "Enter our prize draw today, it is free."),
    ("Low rate credit cards", "Apply online in five minutes."),
    ("Learn a language in 30 days", "Audio courses for busy people."),
    ("The best pizza in town", "Order online and get a free drink."),
    ("Insurance quotes in seconds", "Car, home and travel insurance compared."),
    ("Dating for singles", "Meet people near you tonight."),
    ("Work from home", "Earn extra money in your spare time."),
    ("Luxury watches for less", "Genuine brands at outlet prices."),
    ("Free online games", "Play hundreds of games in your browser."),
)
FAULT_LINKS = {  # directory -> links to the sandbox's fault hosts ("links we are checking")
    0: ("http://faults.test/ok.html", "http://faults.test/redirect/3",
        "http://faults.test/status/404", "http://faults.test/malformed.html"),
    1: ("http://faults.test/status/500", "http://robots-404.test/"),
}


def posted(seed: int, doc_id: int) -> str:
    """The date a post shows (spring 1993; newer posts come first in their sections)."""
    value = random.Random(f"{seed}|date|{doc_id}").random()
    return (datetime.date(1993, 5, 31) - datetime.timedelta(days=int(value * 90))).isoformat()


def _home_url(web: RealPlan, host: str) -> tuple[str, str]:
    return web.by_host[host].url("/"), web.by_host[host].site.name


def _partners(web: RealPlan, plan: SitePlan) -> list[tuple[str, str]]:
    """(URL, name) of the footer's partner sites: never every site of a topic."""
    site = plan.site
    portals = [p.host for p in web.of_kind("portal")]
    directories = [p.host for p in web.of_kind("directory")]
    if site.kind == "topic":
        mates = [p.host for p in web.topical(site.topic) if p.site.seeded and p is not plan]
        hosts = mates + [portals[site.index % len(portals)], directories[0]]
    elif site.kind in ("portal", "directory"):
        hosts = [h for h in portals + directories if h != site.host]
    else:
        hosts = directories[:1]
    return [_home_url(web, host) for host in hosts if host in web.by_host]


def _ads(plan: SitePlan, rng: random.Random) -> str:
    picks = rng.sample(range(1, N_OFFERS + 1), 2)
    blocks = [f'<div class="ad">{a(f"http://{ADS_HOST}/offer/{n}.html", OFFERS[n - 1][0])}</div>'
              for n in picks]
    return f'<div id="sidebar"><h4>Sponsored</h4>{"".join(blocks)}</div>'


def _frame(web: RealPlan, plan: SitePlan, title: str, main: str, rng: random.Random,
           description: str = "") -> str:
    links = [a("/", "Home")]
    links += [a(plan.section_path(index), section.label)
              for index, section in enumerate(plan.sections)]
    if plan.site.kind == "directory":
        links += [a(f"/cat/{topic}.html", TOPIC_NAMES[topic]) for topic in TOPICS]
    links.append(a(plan.about_path(), "About"))
    header = (f'<div id="header"><h2 class="logo">{a("/", plan.site.name)}</h2>'
              f'{ul(links, "nav")}</div>')
    partners = ul([a(url, name) for url, name in _partners(web, plan)], "partners")
    footer = (f'<div id="footer"><h4>Partner sites</h4>{partners}'
              f"<p>&copy; 1993 {esc(plan.site.name)}. All rights reserved.</p></div>")
    body = f'{header}\n<div id="main">{main}</div>\n{_ads(plan, rng)}\n{footer}'
    return document("en", title, HEAD_META, body, description)


def _article_item(web: RealPlan, plan: SitePlan, doc_id: int) -> str:
    doc = web.docs[doc_id]
    return (f'{a(plan.article_path(doc_id), doc.title)} <span class="meta">'
            f"{posted(web.seed, doc_id)}, {len(doc.text.split())} words</span>")


def _home(web: RealPlan, plan: SitePlan) -> tuple[str, str]:
    site = plan.site
    if site.kind == "directory":
        return _directory_home(web, plan)
    if site.kind == "ads":
        offers = [a(f"/offer/{n}.html", title) for n, (title, _) in enumerate(OFFERS, start=1)]
        return site.name, f"<h1>{esc(site.name)}</h1><p>Advertising that works.</p>{ul(offers)}"
    newest = sorted((d for s in plan.sections for d in s.docs[:LATEST]),
                    key=lambda d: (posted(web.seed, d), -d), reverse=True)[:LATEST]
    parts = [f"<h1>{esc(site.name)}</h1><p>{esc(INTRO[site.topic])}</p>",
             f'<h2>Latest posts</h2>{ul([_article_item(web, plan, d) for d in newest], "latest")}']
    for index, section in enumerate(plan.sections):
        latest = [a(plan.article_path(d), web.docs[d].title) for d in section.docs[:3]]
        parts.append(f"<h3>{a(plan.section_path(index), section.label)}</h3>{ul(latest)}"
                     f'{a(plan.section_path(index), "More posts", "more")}')
    return site.name, "".join(parts)


def _section(web: RealPlan, plan: SitePlan, page: Page) -> tuple[str, str]:
    section, total = plan.sections[page.key], plan.sections[page.key].n_pages()
    chunk = section.docs[(page.number - 1) * PAGE_SIZE: page.number * PAGE_SIZE]
    pager = [a(plan.section_path(page.key, page.number - 1), "Previous")] if page.number > 1 else []
    pager += [a(plan.section_path(page.key, n), str(n)) for n in range(1, total + 1)]
    if page.number < total:
        pager.append(a(plan.section_path(page.key, page.number + 1), "Next", "next"))
    title = section.label if page.number == 1 else f"{section.label} - page {page.number}"
    main = (f'<div class="breadcrumb">{a("/", "Home")} &gt; {esc(section.label)}</div>'
            f"<h1>{esc(title)}</h1>"
            + ul([_article_item(web, plan, d) for d in chunk], "posts")
            + f'<div class="pager">{" ".join(pager)}</div>')
    return f"{title} - {plan.site.name}", main


def paragraph_texts(text: str, doc_id: int) -> list[str]:
    """The text cut into paragraphs of 40-90 words (the same cut for the same document)."""
    words = text.split()[:MAX_WORDS]
    rng, out, start = random.Random(f"paragraphs|{doc_id}"), [], 0
    while start < len(words):
        end = start + rng.randint(40, 90)
        out.append(" ".join(words[start:end]))
        start = end
    if len(text.split()) > MAX_WORDS:
        out[-1] += " ..."
    return out


def paragraphs(text: str, doc_id: int) -> str:
    return "".join(f"<p>{esc(p)}</p>" for p in paragraph_texts(text, doc_id))


def _article(web: RealPlan, plan: SitePlan, page: Page) -> tuple[str, str]:
    doc, index = web.docs[page.key], plan.section_of[page.key]
    section = plan.sections[index]
    own, cross = web.neighbours.get(page.key, ((), ()))
    related = [a(plan.article_path(d), web.docs[d].title) for d in own]
    elsewhere = [f"{a(web.article_url(d), web.docs[d].title)} <span>on "
                 f"{esc(web.host_of[d].site.name)}</span>" for d in cross]
    back = plan.section_path(index, plan.page_of(page.key))
    main = (f'<div class="breadcrumb">{a("/", "Home")} &gt; '
            f"{a(plan.section_path(index), section.label)}</div>"
            f'<h1>{esc(doc.title)}</h1><p class="meta">Posted {posted(web.seed, doc.id)} in '
            f'{esc(section.label)}</p><div class="article">{paragraphs(doc.text, doc.id)}</div>'
            + (f'<h3>Related discussions</h3>{ul(related, "related")}' if related else "")
            + (f'<h3>Elsewhere on the web</h3>{ul(elsewhere, "elsewhere")}' if elsewhere else "")
            + f'<div class="tools">{a(back, f"Back to {section.label}")}</div>')
    return f"{doc.title} - {plan.site.name}", main


def _directory_home(web: RealPlan, plan: SitePlan) -> tuple[str, str]:
    site = plan.site
    categories = [a(f"/cat/{topic}.html", TOPIC_NAMES[topic]) for topic in TOPICS]
    featured = [a(*_home_url(web, p.host)) for p in web.of_kind("portal")]
    checking = [a(url, url.removeprefix("http://")) for url in FAULT_LINKS.get(site.index, ())]
    main = (f"<h1>{esc(site.name)}</h1><p>A hand-picked directory of discussion sites.</p>"
            f'<h2>Categories</h2>{ul(categories, "categories")}'
            f'<h2>Featured sites</h2>{ul(featured, "featured")}'
            + (f'<h3>Links we are checking</h3>{ul(checking)}' if checking else ""))
    return site.name, main


def _category(web: RealPlan, plan: SitePlan, page: Page) -> tuple[str, str]:
    topic = TOPICS[page.key]
    listed = [p for p in web.topical(topic) if plan.site.index == 1 or p.site.seeded]
    entries = [f'{a(p.url("/"), p.site.name)} <span>{esc(INTRO[topic])}</span>' for p in listed]
    for portal in web.of_kind("portal"):
        at = [i for i, section in enumerate(portal.sections) if section.topic == topic]
        if at and portal.site.index == plan.site.index:
            entries.append(a(portal.url(portal.section_path(at[0])),
                             f"{portal.site.name}: {TOPIC_NAMES[topic]}"))
    title = f"{TOPIC_NAMES[topic]} - {plan.site.name}"
    return title, f"<h1>{esc(TOPIC_NAMES[topic])}</h1>{ul(entries, 'sites')}"


def _about(plan: SitePlan) -> tuple[str, str]:
    site = plan.site
    n_posts = sum(len(section.docs) for section in plan.sections)
    text = (f"{site.name} has been serving its readers since 1991. " + INTRO[site.topic]
            + (f" It keeps {n_posts} posts in {len(plan.sections)} sections." if n_posts else "")
            + " Posts are the opinions of their authors, not of the site.")
    return f"About {site.name}", (f"<h1>About {esc(site.name)}</h1><p>{esc(text)}</p>"
                                  f"<p>Contact: webmaster@{esc(site.host)}</p>")


def _offer(page: Page) -> tuple[str, str]:
    title, text = OFFERS[page.key - 1]
    return title, f"<h1>{esc(title)}</h1><p>{esc(text)}</p><p>{a('/', 'More offers')}</p>"


def render_page(web: RealPlan, plan: SitePlan, page: Page) -> str:
    """The HTML text of one page."""
    rng = random.Random(f"{web.seed}|page|{plan.host}|{page.path}")
    if page.kind == "home":
        title, main = _home(web, plan)
    elif page.kind == "section":
        title, main = _section(web, plan, page)
    elif page.kind == "article":
        title, main = _article(web, plan, page)
    elif page.kind == "category":
        title, main = _category(web, plan, page)
    elif page.kind == "offer":
        title, main = _offer(page)
    else:
        title, main = _about(plan)
    return _frame(web, plan, title, main, rng, f"{plan.site.name}: {INTRO[plan.site.topic]}")
