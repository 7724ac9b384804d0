"""The link structure of the sandbox web, built eagerly and cheaply (no text is rendered here).

A ``SitePlan`` holds a site's categories, items (details or hub articles) and its page table
``path -> PageSpec``; a ``WebPlan`` holds every site plus the indexes renderers need.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from jlse.sandbox import urls
from jlse.sandbox.sites import SITES, SiteSpec
from jlse.sandbox.text import item_name
from jlse.sandbox.vocab import (
    CRAWL_TOPICS,
    DISTRACTOR_TOPICS,
    LANGUAGES,
    NEWS,
    Language,
    TopicWords,
)

DETAILS_PER_CATEGORY = 30  # at scale 1
ARTICLES_PER_SECTION = 18  # hubs, at scale 1
SMALL_SITE_DETAILS = 8  # per category, 2 categories: the crawl-delay site stays under 30 pages
LIST_PAGE_SIZE = 10
PRINT_EVERY = 4  # details whose id is a multiple of this have a (robots-disallowed) print page


@dataclass(frozen=True, slots=True)
class PageSpec:
    """One HTML page of the served web."""

    kind: str  # home|list|detail|print|about|contact|admin|directory (hubs: list=section,
    #            detail=article)
    path: str
    key: int = -1  # category index (list) or item id (detail, print)
    number: int = 1  # page number of a list page

    @property
    def is_target(self) -> bool:
        return self.kind == "detail"


@dataclass(frozen=True, slots=True)
class Item:
    """A detail page's subject: a product, recipe, match, fund... or a hub article."""

    id: int
    category: int
    name: str


@dataclass
class SitePlan:
    spec: SiteSpec
    language: Language
    words: TopicWords  # the site's own topic (hubs: news)
    categories: list[tuple[str, str]]  # (slug, label); hubs: one section per topic
    items: dict[int, Item] = field(default_factory=dict)
    by_category: list[list[int]] = field(default_factory=list)
    pages: dict[str, PageSpec] = field(default_factory=dict)
    category_topics: list[str] = field(default_factory=list)  # mixed sites: each category's topic

    @property
    def host(self) -> str:
        return self.spec.host

    @property
    def base(self) -> str:
        return f"http://{self.spec.host}"

    def url(self, path: str) -> str:
        return self.base + path

    def list_url(self, category: int, number: int = 1) -> str:
        return self.url(urls.list_path(self.spec.url_style, self.categories[category][0], number))

    def detail_path(self, item_id: int) -> str:
        slug = self.categories[self.items[item_id].category][0]
        return urls.detail_path(self.spec.url_style, slug, item_id)

    def detail_url(self, item_id: int) -> str:
        return self.url(self.detail_path(item_id))

    def n_list_pages(self, category: int) -> int:
        return max(1, -(-len(self.by_category[category]) // LIST_PAGE_SIZE))

    def _category_of(self, page: PageSpec) -> int | None:
        if page.kind == "list":
            return page.key
        if page.kind in ("detail", "print"):
            return self.items[page.key].category
        return None

    def page_topic(self, page: PageSpec) -> str:
        """The topic of one page: its category's topic on mixed sites, else the site's."""
        category = self._category_of(page) if self.category_topics else None
        return self.spec.topic if category is None else self.category_topics[category]

    def for_page(self, page: PageSpec) -> SitePlan:
        """The plan a page is rendered with: on a mixed site, a minority-topic page speaks its
        own topic (a shallow copy with that topic's words); otherwise the plan itself."""
        topic = self.page_topic(page)
        if topic == self.spec.topic:
            return self
        return replace(self, words=self.language.topics[topic])


@dataclass
class WebPlan:
    seed: int
    scale: float
    sites: list[SitePlan]
    by_host: dict[str, SitePlan]
    # host -> hosts whose home pages its footer links to besides its usual partners (the
    # discovery layout's links into and within the long tail; empty in the default web)
    extra_links: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def of_topic(self, topic: str, include_hidden: bool = True) -> list[SitePlan]:
        """The sites of ``topic``, long-tail sites excepted (they are linked from nowhere else)."""
        return [p for p in self.sites if p.spec.topic == topic and not p.spec.longtail
                and (include_hidden or not p.spec.hidden)]

    @property
    def hubs(self) -> list[SitePlan]:
        return [p for p in self.sites if p.spec.kind == "hub"]

    @property
    def distractors(self) -> list[SitePlan]:
        return [p for p in self.sites if p.spec.kind == "distractor" and not p.spec.longtail]


def _categories(spec: SiteSpec, language: Language, words: TopicWords,
                rng: random.Random) -> list[tuple[str, str]]:
    if spec.kind == "hub":
        return [(topic, language.topics[topic].label)
                for topic in CRAWL_TOPICS + DISTRACTOR_TOPICS]
    if spec.small:
        return list(words.categories[:2])
    keep = sorted(rng.sample(range(len(words.categories)), min(6, len(words.categories))))
    return [words.categories[i] for i in keep]


def _item_count(spec: SiteSpec, scale: float, rng: random.Random) -> int:
    if spec.small:
        return SMALL_SITE_DETAILS
    base = ARTICLES_PER_SECTION if spec.kind == "hub" else DETAILS_PER_CATEGORY
    return max(3, round(base * scale * rng.uniform(0.8, 1.2)))


def _add_items(plan: SitePlan, scale: float, rng: random.Random) -> None:
    next_id = rng.randint(1, 9) * 1000
    for index in range(len(plan.categories)):
        ids = []
        for _ in range(_item_count(plan.spec, scale, rng)):
            next_id += rng.randint(1, 3)  # gaps, so ids are not a dense range
            plan.items[next_id] = Item(next_id, index, item_name(plan.language, plan.words, rng))
            ids.append(next_id)
        plan.by_category.append(ids)


def add_pages(plan: SitePlan) -> None:
    """Fill ``plan.pages`` from its categories and items."""
    style = plan.spec.url_style
    pages = [PageSpec("home", urls.home_path())]
    for index, (slug, _label) in enumerate(plan.categories):
        for number in range(1, plan.n_list_pages(index) + 1):
            pages.append(PageSpec("list", urls.list_path(style, slug, number), index, number))
        for item_id in plan.by_category[index]:
            pages.append(PageSpec("detail", urls.detail_path(style, slug, item_id), item_id))
            if plan.spec.kind != "hub" and item_id % PRINT_EVERY == 0:
                pages.append(PageSpec("print", urls.print_path(item_id), item_id))
    pages.append(PageSpec("about", urls.info_path(style, "about")))
    pages.append(PageSpec("contact", urls.info_path(style, "contact")))
    pages.append(PageSpec("admin", urls.ADMIN_PATH))
    if plan.spec.kind == "hub":
        pages.append(PageSpec("directory", urls.DIRECTORY_PATH))
    plan.pages = {page.path: page for page in pages}


def plan_site(spec: SiteSpec, seed: int, scale: float) -> SitePlan:
    """The structure of one site, a pure function of (spec, seed, scale)."""
    rng = random.Random(f"{seed}|plan|{spec.host}")
    language = LANGUAGES[spec.script]
    words = language.topics[NEWS if spec.kind == "hub" else spec.topic]
    plan = SitePlan(spec, language, words, _categories(spec, language, words, rng))
    _add_items(plan, scale, rng)
    add_pages(plan)
    return plan


def plan_web(seed: int = 7, scale: float = 1.0) -> WebPlan:
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    sites = [plan_site(spec, seed, scale) for spec in SITES]
    return WebPlan(seed, scale, sites, {plan.host: plan for plan in sites})
