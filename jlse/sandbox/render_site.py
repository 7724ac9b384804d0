"""HTML of the pages of topical and distractor sites: home, list, detail, print, info, admin.

List pages have many links and little text; detail pages have long contiguous paragraphs and
few links. Every page carries navigation, advert and footer links (the noise a crawler meets).
"""

from __future__ import annotations

import random

from jlse.sandbox import crosslinks, urls
from jlse.sandbox.generator import LIST_PAGE_SIZE, PRINT_EVERY, PageSpec, SitePlan, WebPlan
from jlse.sandbox.layout import a, document, esc, img_a, paras, ul
from jlse.sandbox.text import TextGen, item_name

FEATURE_LINKS = {  # site feature -> (path, UI label) linked from every page footer
    "calendar": ("/calendar/2024/05", "calendar"),
    "tree": ("/tree/a/", "docs"),
    "loop": ("/loop/a", "archive"),
    "errors": ("/error/1.html", "support"),
    "slow": ("/slow.html", "deals"),
    "hang": ("/hang.html", "archive"),
}
CURRENCY = {"en": "$", "zh": "￥", "zh-Hant": "NT$"}  # ￥ (full width) exists in GBK


def text_gen(plan: SitePlan, rng: random.Random) -> TextGen:
    return TextGen(plan.language, plan.words, rng, accents="accents" in plan.spec.features)


def _nav(plan: SitePlan) -> str:
    ui, style = plan.language.ui, plan.spec.url_style
    links = [a("/", ui["home"])]
    links += [a(urls.list_path(style, slug, 1), label) for slug, label in plan.categories]
    links += [a(urls.info_path(style, "about"), ui["about"]),
              a(urls.info_path(style, "contact"), ui["contact"])]
    return (f'<div id="header"><h2 class="logo">{a("/", plan.spec.name)}</h2>'
            f'{ul(links, "nav")}</div>')


def _ads(web: WebPlan, plan: SitePlan, rng: random.Random) -> str:
    blocks = [f'<div class="ad">{img_a(url, f"/static/ad/{i}.png", name)} {a(url, name)}</div>'
              for i, (url, name) in enumerate(crosslinks.ads(web, plan, rng))]
    return f'<div id="sidebar"><h4>{esc(plan.language.ui["ads"])}</h4>{"".join(blocks)}</div>'


def _footer(web: WebPlan, plan: SitePlan, rng: random.Random) -> str:
    ui = plan.language.ui
    partner_links = [a(url, name) for url, name in crosslinks.partners(web, plan)]
    partner_links += [a(url, name) for url, name in crosslinks.portals(web, plan)]
    extra = [a(path, ui[label]) for feature, (path, label) in FEATURE_LINKS.items()
             if feature in plan.spec.features]
    if "session" in plan.spec.features:
        extra.append(a(f"/session/0.html?sid={rng.getrandbits(64):016x}", ui["members"]))
    extra.append(a(urls.ADMIN_PATH, ui["admin"]))
    return (f'<div id="footer"><h4>{esc(ui["partners"])}</h4>{ul(partner_links, "partners")}'
            f'{ul(extra, "footer-links")}'
            f'<p>&copy; 2024 {esc(plan.spec.name)} {esc(ui["copyright"])}</p></div>')


def _frame(web: WebPlan, plan: SitePlan, rng: random.Random, title: str, main: str,
           head_meta: str, description: str) -> str:
    body = (_nav(plan) + f'\n<div id="main">{main}</div>\n' + _ads(web, plan, rng) + "\n"
            + _footer(web, plan, rng))
    keywords = ", ".join(plan.words.keywords[:4])
    return document(plan.language.code, title, head_meta, body, description, keywords)


def _breadcrumb(plan: SitePlan, trail: list[str]) -> str:
    return '<div class="breadcrumb">' + " &gt; ".join([a("/", plan.language.ui["home"])] + trail) \
        + "</div>"


def _item_entry(plan: SitePlan, item_id: int, snippet: str) -> str:
    url, name = plan.detail_path(item_id), plan.items[item_id].name
    return f"{img_a(url, f'/static/img/{item_id}.png', name)} {a(url, name)} <span>{esc(snippet)}</span>"


def _home(web: WebPlan, plan: SitePlan, rng: random.Random) -> tuple[str, str]:
    ui, gen = plan.language.ui, text_gen(plan, rng)
    featured = rng.sample(list(plan.items), min(8, len(plan.items)))
    entries = [_item_entry(plan, item_id, gen.phrase()) for item_id in featured]
    if "chain" in plan.spec.features:  # a redirect chain of three hops to a featured item
        entries[0] = a(f"/r/3/{featured[0]}", plan.items[featured[0]].name)
    if "broken" in plan.spec.features:
        entries.append(a("/missing/old-news.html", item_name(plan.language, plan.words, rng)))
    if "errors" in plan.spec.features:
        entries.append(a("/error/2.html", item_name(plan.language, plan.words, rng)))
    sections = []
    for index, (_slug, label) in enumerate(plan.categories):
        latest = [a(plan.detail_path(i), plan.items[i].name) for i in plan.by_category[index][:3]]
        more = a(plan.list_url(index), ui["more"], "more")
        sections.append(f'<h3>{a(plan.list_url(index), label)}</h3>{ul(latest)}{more}')
    main = (f"<h1>{esc(plan.spec.name)}</h1>{paras([gen.paragraph(2)])}"
            f'<h2>{esc(ui["featured"])}</h2>{ul(entries, "featured")}' + "".join(sections))
    return plan.spec.name, main


def _list(plan: SitePlan, page: PageSpec, rng: random.Random) -> tuple[str, str]:
    ui, gen = plan.language.ui, text_gen(plan, rng)
    label = plan.categories[page.key][1]
    ids = plan.by_category[page.key]
    chunk = ids[(page.number - 1) * LIST_PAGE_SIZE: page.number * LIST_PAGE_SIZE]
    entries = [_item_entry(plan, item_id, gen.phrase()) for item_id in chunk]
    total = plan.n_list_pages(page.key)
    pager = []
    if page.number > 1:
        pager.append(a(plan.list_url(page.key, page.number - 1), ui["prev"]))
    pager += [a(plan.list_url(page.key, n), str(n)) for n in range(1, total + 1)]
    if page.number < total:
        pager.append(a(plan.list_url(page.key, page.number + 1), ui["next"], "next"))
    title = label if page.number == 1 else f'{label} - {ui["page"].format(n=page.number)}'
    main = (_breadcrumb(plan, [esc(label)]) + f"<h1>{esc(title)}</h1>"
            + ul(entries, "items") + f'<div class="pager">{" ".join(pager)}</div>')
    return title, main


def _detail_text(web: WebPlan, plan: SitePlan, item_id: int) -> tuple[str, list[str]]:
    """Title and paragraphs of a detail page (shared with its print version)."""
    rng = random.Random(f"{web.seed}|text|{plan.host}|{item_id}")
    name = plan.items[item_id].name
    title = plan.language.ui["review_title"].format(name=name)
    return title, text_gen(plan, rng).paragraphs(rng.randint(6, 10), 4, 8, name)


def _specs(plan: SitePlan, rng: random.Random) -> str:
    ui = plan.language.ui
    rows = [(ui["price"], f"{CURRENCY[plan.language.code]}{rng.randint(5, 400) * 10 - 1}"),
            (ui["rating"], f"{rng.randint(25, 50) / 10}/5"),
            (ui["release"], f"{rng.randint(2019, 2024)}-{rng.randint(1, 12):02d}")]
    rows += [(term, rng.choice(plan.language.adjectives))
             for term in rng.sample(plan.words.terms, 3)]
    cells = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<h3>{esc(ui["specs"])}</h3><table class="specs">{cells}</table>'


def _detail(web: WebPlan, plan: SitePlan, page: PageSpec, rng: random.Random) -> tuple[str, str]:
    ui, item = plan.language.ui, plan.items[page.key]
    title, text = _detail_text(web, plan, item.id)
    label = plan.categories[item.category][1]
    siblings = [i for i in plan.by_category[item.category] if i != item.id]
    related = [a(crosslinks.item_link(plan, i).removeprefix(plan.base), plan.items[i].name)
               for i in rng.sample(siblings, min(5, len(siblings)))]
    if "broken" in plan.spec.features and rng.random() < 0.35:
        related.append(a(f"/missing/{item.id + 7}.html", item_name(plan.language, plan.words, rng)))
    list_number = plan.by_category[item.category].index(item.id) // LIST_PAGE_SIZE + 1
    tools = [a(plan.list_url(item.category, list_number), ui["back"].format(label=label))]
    if item.id % PRINT_EVERY == 0:
        tools.append(a(urls.print_path(item.id), ui["print"]))
    main = (_breadcrumb(plan, [a(plan.list_url(item.category), label), esc(item.name)])
            + f'<h1>{esc(title)}</h1>{_specs(plan, rng)}<div class="article">{paras(text)}</div>'
            + f'<h3>{esc(ui["related"])}</h3>{ul(related, "related")}'
            + f'<div class="tools">{" | ".join(tools)}</div>')
    return title, main


def _info(plan: SitePlan, page: PageSpec, rng: random.Random) -> tuple[str, str]:
    ui, gen = plan.language.ui, text_gen(plan, rng)
    title = f'{ui[page.kind]} - {plan.spec.name}'
    body = paras(gen.paragraphs(3 if page.kind == "about" else 1, 3, 5))
    if page.kind == "contact":
        body += ul([f'{esc(ui["address"])}: {rng.randint(1, 999)} Sandbox Road',
                    f'{esc(ui["email"])}: info@{plan.host}'])
    return title, f'<h1>{esc(ui[page.kind])}</h1>{body}'


def _admin(plan: SitePlan) -> tuple[str, str]:
    ui = plan.language.ui
    form = (f'<form method="post" action="/admin/login"><label>{esc(ui["username"])} '
            f'<input name="user"></label><label>{esc(ui["password"])} '
            f'<input name="password" type="password"></label>'
            f'<button type="submit">{esc(ui["login"])}</button></form>')
    return f'{ui["admin"]} - {plan.spec.name}', f'<h1>{esc(ui["admin"])}</h1>{form}'


def render_print(web: WebPlan, plan: SitePlan, page: PageSpec, head_meta: str) -> str:
    title, text = _detail_text(web, plan, page.key)
    body = f"<h1>{esc(title)}</h1>{paras(text)}<p>{a(plan.detail_path(page.key), title)}</p>"
    return document(plan.language.code, title, head_meta, body)


def render_site_page(web: WebPlan, plan: SitePlan, page: PageSpec, head_meta: str) -> str:
    """The HTML text of one page of a topical or distractor site."""
    plan = plan.for_page(page)
    if page.kind == "print":
        return render_print(web, plan, page, head_meta)
    rng = random.Random(f"{web.seed}|page|{plan.host}|{page.path}")
    if page.kind == "home":
        title, main = _home(web, plan, rng)
    elif page.kind == "list":
        title, main = _list(plan, page, rng)
    elif page.kind == "detail":
        title, main = _detail(web, plan, page, rng)
    elif page.kind == "admin":
        title, main = _admin(plan)
    else:
        title, main = _info(plan, page, rng)
    description = f"{plan.spec.name}: {plan.words.label}"
    return _frame(web, plan, rng, title, main, head_meta, description)
