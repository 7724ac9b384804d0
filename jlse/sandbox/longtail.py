"""The discovery layout: the default web plus a long tail of small sites the seeds barely reach.

For each of the seven topics (three crawl topics, four distractors) 22-26 small sites of
10-25 pages each, in English and Chinese; about 15% of them are mixed (a minority category of
another topic, the majority topic keeping more than half of the pages). Links:

- every existing non-hub site links to the same two *entry* long-tail sites of its topic,
  so the seeds reach at most two long-tail sites per topic directly;
- each long-tail site links to 2-3 other long-tail sites (80% of its own topic) and, half the
  time, to one existing site of its topic (so ``link:`` on a known site finds some of them);
- about 30% of each topic's long-tail sites (never an entry) are *orphans*: no site links to
  them, only a search engine finds them.

Everything is a pure function of the seed; the default web does not change at all.
"""

from __future__ import annotations

import random

from jlse.sandbox.generator import Item, SitePlan, WebPlan, add_pages, plan_web
from jlse.sandbox.sites import SITES, SiteSpec
from jlse.sandbox.text import item_name
from jlse.sandbox.vocab import CRAWL_TOPICS, DISTRACTOR_TOPICS, LANGUAGES

TOPICS = CRAWL_TOPICS + DISTRACTOR_TOPICS
SITES_PER_TOPIC = (22, 26)
MIXED_SHARE = 0.17
ORPHAN_SHARE = 0.3
ENTRIES_PER_TOPIC = 2
OWN_TOPIC_LINKS = 0.8  # share of a long-tail site's links that stay in its topic
MAX_MINORITY_SHARE = 0.45  # a mixed site's majority topic keeps at least 55% of its pages

EN_STEMS = {
    "phones": ("phone", "mobile", "handset", "smartphone", "cellular"),
    "cameras": ("camera", "lens", "shutter", "photo-gear", "aperture"),
    "laptops": ("laptop", "notebook", "ultrabook", "portable-pc", "clamshell"),
    "cooking": ("recipe", "kitchen", "skillet", "baking", "pantry"),
    "football": ("football", "soccer", "goalmouth", "matchplay", "terrace"),
    "travel": ("travel", "voyage", "backpack", "itinerary", "passport"),
    "finance": ("finance", "money", "dividend", "portfolio", "savings"),
}
EN_TAILS = ("notes", "corner", "den", "digest", "club", "talk", "garage", "bench", "weekly",
            "folio", "yard", "post", "desk", "log", "circle")
ZH_STEMS = {
    "phones": (("shouji", "手机"), ("yidong", "移动"), ("jixing", "机型")),
    "cameras": (("xiangji", "相机"), ("sheying", "摄影"), ("jingtou", "镜头")),
    "laptops": (("bijiben", "笔记本"), ("diannao", "电脑"), ("qingbo", "轻薄本")),
    "cooking": (("meishi", "美食"), ("chufang", "厨房"), ("caipu", "菜谱")),
    "football": (("zuqiu", "足球"), ("qiumi", "球迷"), ("lvyin", "绿茵")),
    "travel": (("lvyou", "旅游"), ("lvxing", "旅行"), ("youji", "游记")),
    "finance": (("licai", "理财"), ("jijin", "基金"), ("touzi", "投资")),
}
ZH_TAILS = (("xiaozhan", "小站"), ("biji", "笔记"), ("luntan", "论坛"), ("boke", "博客"),
            ("zatan", "杂谈"), ("pindao", "频道"), ("wu", "小屋"), ("tang", "讲堂"),
            ("julebu", "俱乐部"), ("riji", "日记"))
ZH_ENCODINGS = ("utf-8", "utf-8", "utf-8", "gbk", "gb18030")
DECLARES = ("header", "header", "header", "meta", "both", "none")
URL_STYLES = ("html", "php", "path")


# --- the sites ---

def _names(topic: str, script: str, rng: random.Random, taken: set[str]) -> tuple[str, str]:
    """(host, display name) not yet taken, built from the topic's stems."""
    while True:
        if script == "en":
            stem, tail = rng.choice(EN_STEMS[topic]), rng.choice(EN_TAILS)
            host, name = f"{stem}-{tail}.test", f"{stem} {tail}".replace("-", " ").title()
        else:
            (stem, stem_zh), (tail, tail_zh) = rng.choice(ZH_STEMS[topic]), rng.choice(ZH_TAILS)
            host, name = f"{stem}-{tail}.test", stem_zh + tail_zh
        if host not in taken:
            taken.add(host)
            return host, name


def _spec(topic: str, rng: random.Random, taken: set[str]) -> SiteSpec:
    script = "en" if rng.random() < 0.55 else "zh"
    host, name = _names(topic, script, rng, taken)
    mix = rng.choice([t for t in TOPICS if t != topic]) if rng.random() < MIXED_SHARE else ""
    return SiteSpec(
        host, name, "topic" if topic in CRAWL_TOPICS else "distractor", topic, script,
        "utf-8" if script == "en" else rng.choice(ZH_ENCODINGS), declare=rng.choice(DECLARES),
        robots=rng.choice(("normal", "normal", "normal", "404")),
        url_style=rng.choice(URL_STYLES), small=True, longtail=True, mix_topic=mix)


def longtail_specs(seed: int) -> list[SiteSpec]:
    """The long-tail sites of the discovery web for ``seed``, topic by topic."""
    rng = random.Random(f"{seed}|longtail|sites")
    taken = {spec.host for spec in SITES}
    return [_spec(topic, rng, taken) for topic in TOPICS
            for _ in range(rng.randint(*SITES_PER_TOPIC))]


# --- one site's structure ---

def _categories(spec: SiteSpec, rng: random.Random) -> tuple[list[tuple[str, str]], list[str]]:
    """(categories, topic of each): 1-2 of the site's topic, plus one of ``mix_topic``."""
    language = LANGUAGES[spec.script]
    own = language.topics[spec.topic].categories
    n_own = 2 if spec.mix_topic else rng.randint(1, 2)
    categories = rng.sample(list(own), n_own)
    topics = [spec.topic] * n_own
    if spec.mix_topic:
        slugs = {slug for slug, _label in categories}
        other = [c for c in language.topics[spec.mix_topic].categories if c[0] not in slugs]
        categories.append(rng.choice(other))
        topics.append(spec.mix_topic)
    return categories, topics


def _item_count(plan: SitePlan, topic: str, rng: random.Random) -> int:
    """Items of one category: 10-25 pages a site (a mixed site's own categories stay small)."""
    if topic != plan.spec.topic:
        return rng.randint(4, 7)
    if plan.spec.mix_topic:
        return rng.randint(3, 4)
    return rng.randint(3, 7) if len(plan.categories) > 1 else rng.randint(5, 9)


def _add_items(plan: SitePlan, rng: random.Random) -> None:
    next_id = rng.randint(1, 9) * 1000
    for index, topic in enumerate(plan.category_topics):
        words = plan.language.topics[topic]
        ids = []
        for _ in range(_item_count(plan, topic, rng)):
            next_id += rng.randint(1, 3)
            plan.items[next_id] = Item(next_id, index, item_name(plan.language, words, rng))
            ids.append(next_id)
        plan.by_category.append(ids)


def minority_share(plan: SitePlan) -> float:
    """The share of a site's pages that are not about its own topic."""
    other = sum(plan.page_topic(page) != plan.spec.topic for page in plan.pages.values())
    return other / len(plan.pages)


def _trim_minority(plan: SitePlan) -> None:
    """Drop minority items until the site's own topic holds a clear majority of its pages."""
    minority = plan.by_category[-1]
    while minority_share(plan) > MAX_MINORITY_SHARE and len(minority) > 1:
        del plan.items[minority.pop()]
        add_pages(plan)


def plan_longtail_site(spec: SiteSpec, seed: int) -> SitePlan:
    """The structure of one long-tail site, a pure function of (spec, seed)."""
    rng = random.Random(f"{seed}|longtail|plan|{spec.host}")
    language = LANGUAGES[spec.script]
    categories, topics = _categories(spec, rng)
    plan = SitePlan(spec, language, language.topics[spec.topic], categories,
                    category_topics=topics)
    _add_items(plan, rng)
    add_pages(plan)
    if spec.mix_topic:
        _trim_minority(plan)
    return plan


# --- links ---

def _roles(tail: list[SitePlan], rng: random.Random) -> tuple[dict[str, list[str]], set[str]]:
    """(entry hosts per topic, orphan hosts): entries are linked from the existing sites,
    orphans from nowhere."""
    entries: dict[str, list[str]] = {}
    orphans: set[str] = set()
    for topic in TOPICS:
        hosts = [plan.host for plan in tail if plan.spec.topic == topic]
        rng.shuffle(hosts)
        entries[topic] = sorted(hosts[:ENTRIES_PER_TOPIC])
        orphans.update(hosts[ENTRIES_PER_TOPIC:][:round(ORPHAN_SHARE * len(hosts))])
    return entries, orphans


def _out_links(plan: SitePlan, linkable: dict[str, list[str]], base: WebPlan,
               rng: random.Random) -> tuple[str, ...]:
    """The hosts one long-tail site links to: 2-3 long-tail sites, maybe one existing site."""
    own = plan.spec.topic
    targets: list[str] = []
    for _ in range(rng.randint(2, 3)):
        topic = own if rng.random() < OWN_TOPIC_LINKS else rng.choice([t for t in TOPICS
                                                                       if t != own])
        pool = [host for host in linkable[topic] if host != plan.host and host not in targets]
        if pool:
            targets.append(rng.choice(pool))
    known = base.of_topic(own, include_hidden=False)
    if known and rng.random() < 0.5:
        targets.append(rng.choice(known).host)
    return tuple(targets)


def link_plan(base: WebPlan, tail: list[SitePlan], seed: int) -> dict[str, tuple[str, ...]]:
    """``WebPlan.extra_links`` of the discovery web: host -> hosts its footer links to."""
    rng = random.Random(f"{seed}|longtail|links")
    entries, orphans = _roles(tail, rng)
    linkable = {topic: [p.host for p in tail if p.spec.topic == topic and p.host not in orphans]
                for topic in TOPICS}
    links = {plan.host: _out_links(plan, linkable, base, rng) for plan in tail}
    for site in base.sites:
        if site.spec.kind != "hub":
            links[site.host] = tuple(entries[site.spec.topic])
    return links


def plan_discovery_web(seed: int = 7, scale: float = 1.0) -> WebPlan:
    """The default web of ``(seed, scale)`` plus the long tail (whose size ignores ``scale``)."""
    base = plan_web(seed, scale)
    tail = [plan_longtail_site(spec, seed) for spec in longtail_specs(seed)]
    sites = base.sites + tail
    return WebPlan(seed, scale, sites, {plan.host: plan for plan in sites},
                   extra_links=link_plan(base, tail, seed))


def orphan_hosts(web: WebPlan) -> set[str]:
    """Long-tail hosts no other site links to (only a search engine finds them)."""
    linked = {host for targets in web.extra_links.values() for host in targets}
    return {plan.host for plan in web.sites if plan.spec.longtail and plan.host not in linked}
