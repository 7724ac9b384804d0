"""HTML of hub sites: portals and directories whose pages are irrelevant to every topic but link
to topical sites, the hidden ones included (the "delayed benefit" a focused crawler must learn).
"""

from __future__ import annotations

import random

from jlse.sandbox import crosslinks, urls
from jlse.sandbox.generator import LIST_PAGE_SIZE, PageSpec, SitePlan, WebPlan
from jlse.sandbox.layout import a, document, esc, paras, ul
from jlse.sandbox.render_site import FEATURE_LINKS
from jlse.sandbox.text import TextGen
from jlse.sandbox.vocab import CRAWL_TOPICS, DISTRACTOR_TOPICS

SECTION_MIX = 0.15  # share of a hub article's terms taken from its section's topic


def _gen(plan: SitePlan, rng: random.Random, section: int | None = None) -> TextGen:
    mix = None
    if section is not None:
        mix = plan.language.topics[plan.categories[section][0]]
    return TextGen(plan.language, plan.words, rng, mix=mix, mix_ratio=SECTION_MIX)


def _section_label(plan: SitePlan, index: int) -> str:
    return plan.language.ui["section_news"].format(label=plan.categories[index][1])


def _frame(web: WebPlan, plan: SitePlan, rng: random.Random, title: str, main: str,
           head_meta: str) -> str:
    ui = plan.language.ui
    nav = [a("/", ui["home"])] + [a(plan.list_url(i), label)
                                  for i, (_slug, label) in enumerate(plan.categories)]
    nav += [a(urls.DIRECTORY_PATH, ui["directory"]), a(urls.info_path("hub", "about"), ui["about"])]
    ads = [a(url, name) for url, name in crosslinks.ads(web, plan, rng, count=2)]
    other_hubs = [a(hub.url("/"), hub.spec.name) for hub in web.hubs if hub is not plan]
    extra = [a(path, ui[label]) for feature, (path, label) in FEATURE_LINKS.items()
             if feature in plan.spec.features]
    if "broken" in plan.spec.features:
        extra.append(a("/missing/old-page.html", ui["archive"]))
    extra += [a(urls.info_path("hub", "contact"), ui["contact"]), a(urls.ADMIN_PATH, ui["admin"])]
    body = (f'<div id="header"><h2 class="logo">{a("/", plan.spec.name)}</h2>{ul(nav, "nav")}</div>'
            f'\n<div id="main">{main}</div>\n'
            f'<div id="sidebar"><h4>{esc(ui["ads"])}</h4>{ul(ads)}</div>\n'
            f'<div id="footer"><h4>{esc(ui["portals"])}</h4>{ul(other_hubs)}{ul(extra)}'
            f'<p>&copy; 2024 {esc(plan.spec.name)} {esc(ui["copyright"])}</p></div>')
    return document(plan.language.code, title, head_meta, body, plan.spec.name,
                    ", ".join(plan.words.keywords))


def _site_directory(web: WebPlan, plan: SitePlan, rng: random.Random) -> str:
    """Every site of the web, grouped by topic: the way in to the hidden sites."""
    gen = _gen(plan, rng)
    groups = []
    for topic in CRAWL_TOPICS + DISTRACTOR_TOPICS:
        label = plan.language.topics[topic].label
        entries = [f"{a(site.url('/'), site.spec.name)} <span>{esc(gen.phrase())}</span>"
                   for site in web.of_topic(topic)]
        groups.append(f"<h3>{esc(label)}</h3>{ul(entries, 'sites')}")
    hubs = [a(hub.url("/"), hub.spec.name) for hub in web.hubs]
    groups.append(f'<h3>{esc(plan.language.ui["portals"])}</h3>{ul(hubs)}')
    return "".join(groups)


def _article_links(plan: SitePlan, ids: list[int]) -> list[str]:
    return [a(urls.detail_path("hub", "", i), _article_title(plan, i)) for i in ids]


def _article_title(plan: SitePlan, item_id: int) -> str:
    item = plan.items[item_id]
    label = plan.categories[item.category][1]
    return f"{item.name}: {label}" if plan.language.code == "en" else f"{item.name}：{label}"


def _home(web: WebPlan, plan: SitePlan, rng: random.Random) -> str:
    ui = plan.language.ui
    main = f"<h1>{esc(plan.spec.name)}</h1>{paras([_gen(plan, rng).paragraph(2)])}"
    if plan.spec.hub_kind == "directory":
        return main + f'<h2>{esc(ui["all_sites"])}</h2>' + _site_directory(web, plan, rng)
    for index, (topic, _label) in enumerate(plan.categories):
        links = _article_links(plan, plan.by_category[index][:2])
        links += [a(url, name) for url, name in crosslinks.topic_picks(web, topic, rng, 3)]
        main += (f"<h3>{a(plan.list_url(index), _section_label(plan, index))}</h3>{ul(links)}"
                 + a(plan.list_url(index), ui["more"], "more"))
    return main + f'<p>{a(urls.DIRECTORY_PATH, ui["directory"])}</p>'


def _section(web: WebPlan, plan: SitePlan, page: PageSpec, rng: random.Random) -> tuple[str, str]:
    ui = plan.language.ui
    ids = plan.by_category[page.key]
    chunk = ids[(page.number - 1) * LIST_PAGE_SIZE: page.number * LIST_PAGE_SIZE]
    links = _article_links(plan, chunk)
    topic = plan.categories[page.key][0]
    links += [a(url, name) for url, name in crosslinks.topic_picks(web, topic, rng, 4)]
    total = plan.n_list_pages(page.key)
    pager = [a(plan.list_url(page.key, n), str(n)) for n in range(1, total + 1)]
    if page.number < total:
        pager.append(a(plan.list_url(page.key, page.number + 1), ui["next"], "next"))
    title = _section_label(plan, page.key)
    if page.number > 1:
        title += f' - {ui["page"].format(n=page.number)}'
    return title, f"<h1>{esc(title)}</h1>{ul(links, 'items')}<div class=\"pager\">{' '.join(pager)}</div>"


def _article(web: WebPlan, plan: SitePlan, page: PageSpec, rng: random.Random) -> tuple[str, str]:
    ui, item = plan.language.ui, plan.items[page.key]
    gen = _gen(plan, rng, item.category)
    title = _article_title(plan, item.id)
    text = gen.paragraphs(rng.randint(5, 8), 4, 7)
    topic = plan.categories[item.category][0]
    url, _name = crosslinks.topic_picks(web, topic, rng, 1)[0]
    site = web.by_host[url.split("/")[2]].spec.name
    siblings = [i for i in plan.by_category[item.category] if i != item.id]
    related = _article_links(plan, rng.sample(siblings, min(4, len(siblings))))
    more = ui["article_more"].format(label=plan.categories[item.category][1])
    main = (f'<h1>{esc(title)}</h1><div class="article">{paras(text)}</div>'
            f'<p>{a(url, ui["follow"].format(site=site))}</p>{ul(related, "related")}'
            f'<p>{a(plan.list_url(item.category), more)}</p>')
    return title, main


def render_hub_page(web: WebPlan, plan: SitePlan, page: PageSpec, head_meta: str) -> str:
    """The HTML text of one page of a hub site."""
    rng = random.Random(f"{web.seed}|page|{plan.host}|{page.path}")
    ui = plan.language.ui
    if page.kind == "home":
        title, main = plan.spec.name, _home(web, plan, rng)
    elif page.kind == "list":
        title, main = _section(web, plan, page, rng)
    elif page.kind == "detail":
        title, main = _article(web, plan, page, rng)
    elif page.kind == "directory":
        title = ui["directory"]
        main = f"<h1>{esc(title)}</h1>" + _site_directory(web, plan, rng)
    elif page.kind == "admin":
        title, main = ui["admin"], f'<h1>{esc(ui["admin"])}</h1><form method="post"></form>'
    else:
        title = ui[page.kind]
        main = f"<h1>{esc(title)}</h1>" + paras(_gen(plan, rng).paragraphs(2, 3, 5))
    return _frame(web, plan, rng, f"{title} - {plan.spec.name}", main, head_meta)
