"""The structure of the newswire web: its sites, which stories each carries, and its pages.

Sites (all ``*.wire``), 96 in all: 20 where the stories first run, and 76 syndicating sites
that republish or quote them (``syndication``). The first 20:

- four general outlets carrying every topic in one category each (mixed-topic sites);
- ten specialist desks, one or two per crawl topic, whose categories are the topic's R52 labels,
  ~80% on their topic and the rest company news (off-topic);
- four corporate sites of earnings and acquisitions stories (off-topic sites);
- two aggregators without stories: a topic index (a hub page per topic linking every site that
  carries it) and a headline stream of the newest stories of every site, paginated.

Each served (train) story is first an article of exactly one of these (its original), then
copies on syndicating sites. Every original article has a print version under ``/print/`` that
robots.txt disallows. Nothing here renders text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from jlse.sandbox.newswire.corpus import CORPORATE, CRAWL_TOPICS, TOPICS, Story
from jlse.sandbox.newswire.syndication import section_of_copy, syndicate, syndicated_table

OUTLETS = (("the-ledger.wire", "The Ledger"), ("daily-markets.wire", "Daily Markets"),
           ("world-business.wire", "World Business Review"), ("city-desk.wire", "City Desk"))
DESKS = {
    "energy": (("energy-desk.wire", "Energy Desk"), ("oil-report.wire", "The Oil Report")),
    "money": (("fx-monitor.wire", "FX Monitor"), ("rates-review.wire", "Rates Review")),
    "economy": (("economy-watch.wire", "Economy Watch"),),
    "trade": (("trade-bulletin.wire", "Trade Bulletin"), ("shipping-news.wire", "Shipping News")),
    "commodities": (("commodity-times.wire", "Commodity Times"),
                    ("softs-weekly.wire", "Softs Weekly")),
    "metals": (("metals-monitor.wire", "Metals Monitor"),),
}
CORPORATE_SITES = (("results-daily.wire", "Results Daily"), ("deal-street.wire", "Deal Street"),
                   ("press-release.wire", "Press Release Wire"),
                   ("investor-news.wire", "Investor News"))
CORPORATE_WEIGHTS = {"earnings": (0.45, 0.0, 0.30, 0.25), "acquisitions": (0.0, 0.45, 0.25, 0.30)}
INDEX_HOST, STREAM_HOST = "newsindex.wire", "headlines.wire"
AGGREGATORS = ((INDEX_HOST, "News Index"), (STREAM_HOST, "Headlines"))
TOPIC_NAMES = {"earnings": "Company results", "acquisitions": "Mergers and acquisitions",
               "energy": "Energy", "money": "Money markets", "economy": "Economy",
               "trade": "Trade and shipping", "commodities": "Commodities", "metals": "Metals"}
DESK_WEIGHTS = (0.6, 0.4)
OUTLET_SHARE = 0.35  # of every topic's stories, on the outlets
OFF_TOPIC_SHARE = 0.2  # of a desk's articles: company news
PAGE_SIZE = 15  # links per category page
STREAM_PAGES, STREAM_SIZE = 20, 20  # the headline stream's pages and links per page
SLOW_HOST, SLOW_PATH, SLOW_SECONDS = "daily-markets.wire", "/live/", 2.0
ROBOTS = {"economy-watch.wire": ("/print/", "/housing/")}  # every other site: ("/print/",)
CRAWL_DELAY = {"investor-news.wire": 1}
ORIGINAL_KINDS = ("outlet", "desk", "corporate")  # the sites stories are first published on
SYNDICATED_PATHS = {  # kind -> (category page 1, its page n, article)
    "regional": ("/{slug}/", "index{n}.html", "/{slug}/story-{id}.html"),
    "journal": ("/topics/{slug}/", "?p={n}", "/articles/{id}/"),
    "blog": ("/archive/", "page/{n}/", "/posts/{id}.html"),
    "portal": ("/markets/{slug}/", "?page={n}", "/story/{id}"),
}
LATEST_KEPT = 20  # newest stories of a site kept for partner blocks
PAPERS_PATH = "/papers.html"  # the news index's list of regional papers


@dataclass(frozen=True)
class WireSite:
    host: str
    name: str
    kind: str  # outlet | desk | corporate | aggregator | regional | journal | blog | portal
    topic: str  # a desk's, journal's or topic blog's topic; "hub" otherwise
    index: int = 0  # among the sites of its kind (and topic)
    disallow: tuple[str, ...] = ("/print/",)
    crawl_delay: int = 0


@dataclass(frozen=True, slots=True)
class Page:
    kind: str  # home | category | article | print | about | topic | stream | live
    path: str
    key: int = -1  # category index (category), story id (article, print), topic index (topic)
    number: int = 1  # page number (category, stream)


@dataclass
class Category:
    slug: str
    label: str
    docs: list[int] = field(default_factory=list)  # newest first
    topic: str = "hub"  # the topic most of its stories have

    def n_pages(self) -> int:
        return max(1, -(-len(self.docs) // PAGE_SIZE))


@dataclass
class SitePlan:
    site: WireSite
    sections: list[Category] = field(default_factory=list)
    pages: dict[str, Page] = field(default_factory=dict)
    section_of: dict[int, int] = field(default_factory=dict)  # story id -> category index

    @property
    def host(self) -> str:
        return self.site.host

    def url(self, path: str) -> str:
        return f"http://{self.site.host}{path}"

    def category_path(self, index: int, number: int = 1) -> str:
        slug, kind = self.sections[index].slug, self.site.kind
        if kind == "outlet":
            return f"/section/{slug}/" + ("" if number == 1 else f"page/{number}/")
        if kind == "desk":
            return f"/{slug}/" + ("" if number == 1 else f"?page={number}")
        if kind == "corporate":
            return f"/releases/{slug}/" + ("" if number == 1 else f"{number}.html")
        return SYNDICATED_PATHS[kind][0].format(slug=slug) + (
            "" if number == 1 else SYNDICATED_PATHS[kind][1].format(n=number))

    def article_path(self, doc_id: int) -> str:
        kind = self.site.kind
        if kind == "outlet":
            return f"/news/{doc_id}.html"
        if kind == "desk":
            return f"/{self.sections[self.section_of[doc_id]].slug}/{doc_id}.html"
        if kind == "corporate":
            return f"/release/{doc_id}.html"
        return SYNDICATED_PATHS[kind][2].format(
            slug=self.sections[self.section_of[doc_id]].slug, id=doc_id)

    def page_of(self, doc_id: int) -> int:
        """The number of the category page that lists ``doc_id``."""
        return self.sections[self.section_of[doc_id]].docs.index(doc_id) // PAGE_SIZE + 1

    def disallowed(self, path: str) -> bool:
        return any(path.startswith(prefix) for prefix in self.site.disallow)


def age(seed: int, doc_id: int) -> float:
    """How old a story is, in [0, 1): categories list the youngest first."""
    return random.Random(f"{seed}|date|{doc_id}").random()


def site_table() -> list[WireSite]:
    def site(host: str, name: str, kind: str, topic: str = "hub", index: int = 0) -> WireSite:
        return WireSite(host, name, kind, topic, index, ROBOTS.get(host, ("/print/",)),
                        CRAWL_DELAY.get(host, 0))

    sites = [site(host, name, "outlet", index=i) for i, (host, name) in enumerate(OUTLETS)]
    sites += [site(host, name, "desk", topic, i) for topic in CRAWL_TOPICS
              for i, (host, name) in enumerate(DESKS[topic])]
    sites += [site(host, name, "corporate", index=i)
              for i, (host, name) in enumerate(CORPORATE_SITES)]
    sites += [site(host, name, "aggregator", index=i) for i, (host, name) in enumerate(AGGREGATORS)]
    return sites + syndicated_table(site)


def _split(ids: list[int], weights: tuple[float, ...]) -> list[list[int]]:
    """``ids`` cut into consecutive parts of the given shares (the last takes the rest)."""
    parts, start = [], 0
    for number, weight in enumerate(weights):
        end = len(ids) if number == len(weights) - 1 else start + round(weight * len(ids))
        parts.append(ids[start:end])
        start = end
    return parts


def assign(docs: list[Story], sites: list[WireSite], seed: int) -> dict[str, list[int]]:
    """host -> ids of its articles: ~35% of every topic to the outlets, the rest to the topic's
    desks (crawl topics) or the corporate sites, and company news to fill ~20% of each desk."""
    rng = random.Random(f"{seed}|assign")
    out: dict[str, list[int]] = {s.host: [] for s in sites}
    outlets = [s.host for s in sites if s.kind == "outlet"]
    corporate = [s.host for s in sites if s.kind == "corporate"]
    spread: list[int] = []
    leftovers: dict[str, list[int]] = {}
    for topic in TOPICS:
        ids = [doc.id for doc in docs if doc.topic == topic]
        rng.shuffle(ids)
        n_outlet = round(OUTLET_SHARE * len(ids))
        spread += ids[:n_outlet]
        leftovers[topic] = ids[n_outlet:]
    migrants = leftovers["earnings"] + leftovers["acquisitions"]
    rng.shuffle(migrants)
    for topic in CRAWL_TOPICS:
        desks = [s.host for s in sites if s.kind == "desk" and s.topic == topic]
        weights = DESK_WEIGHTS if len(desks) > 1 else (1.0,)
        for host, part in zip(desks, _split(leftovers[topic], weights), strict=True):
            need = round(len(part) * OFF_TOPIC_SHARE / (1 - OFF_TOPIC_SHARE))
            out[host] += part + [migrants.pop() for _ in range(min(need, len(migrants)))]
    kept = set(migrants)
    for topic in CORPORATE:
        ids = [doc_id for doc_id in leftovers[topic] if doc_id in kept]
        for host, part in zip(corporate, _split(ids, CORPORATE_WEIGHTS[topic]), strict=True):
            out[host] += part
    rng.shuffle(spread)
    for number, doc_id in enumerate(spread):
        out[outlets[number % len(outlets)]].append(doc_id)
    return out


def _categories(site: WireSite, docs: dict[int, Story], ids: list[int]) -> list[Category]:
    """Outlets and corporate sites: one category per topic; desks: one per R52 label of their
    topic and "companies" for the rest."""
    if site.kind not in ORIGINAL_KINDS:
        def key(doc: Story) -> tuple[str, str]:
            return section_of_copy(site, doc)
    elif site.kind == "desk":
        def key(doc: Story) -> tuple[str, str]:
            if doc.topic != site.topic:
                return "companies", "Company news"
            return doc.label, doc.label.replace("-", " ").title()
    else:
        def key(doc: Story) -> tuple[str, str]:
            return doc.topic, TOPIC_NAMES[doc.topic]
    by_slug: dict[str, Category] = {}
    for doc_id in ids:
        slug, label = key(docs[doc_id])
        by_slug.setdefault(slug, Category(slug, label)).docs.append(doc_id)
    categories = sorted(by_slug.values(), key=lambda c: (c.slug == "companies", -len(c.docs),
                                                         c.slug))
    for category in categories:
        topics = [docs[doc_id].topic for doc_id in category.docs]
        category.topic = max(sorted(set(topics)), key=topics.count)
    return categories


def plan_site(site: WireSite, docs: dict[int, Story], ids: list[int], seed: int,
              prints: bool = True) -> SitePlan:
    """A site's categories (newest story first) and its page table (``prints``: with the
    articles' print versions)."""
    ordered = sorted(ids, key=lambda doc_id: age(seed, doc_id))
    plan = SitePlan(site, _categories(site, docs, ordered) if ordered else [])
    for index, category in enumerate(plan.sections):
        for doc_id in category.docs:
            plan.section_of[doc_id] = index
    pages = [Page("home", "/"), Page("about", "/about.html")]
    if site.host == INDEX_HOST:
        pages += [Page("topic", f"/topic/{topic}.html", n) for n, topic in enumerate(TOPICS)]
        pages.append(Page("papers", PAPERS_PATH))
    if site.host == STREAM_HOST:
        pages += [Page("stream", "/latest/" + ("" if n == 1 else f"?p={n}"), number=n)
                  for n in range(1, STREAM_PAGES + 1)]
    if site.host == SLOW_HOST:
        pages.append(Page("live", SLOW_PATH))
    for index, category in enumerate(plan.sections):
        pages += [Page("category", plan.category_path(index, number), index, number)
                  for number in range(1, category.n_pages() + 1)]
        pages += [Page("article", plan.article_path(doc_id), doc_id) for doc_id in category.docs]
        if prints and site.kind in ORIGINAL_KINDS:
            pages += [Page("print", f"/print/{doc_id}.html", doc_id) for doc_id in category.docs]
    plan.pages = {page.path: page for page in pages}
    return plan


def plan_sites(docs: list[Story], seed: int, fraction: float = 1.0,
               prints: bool = True) -> list[SitePlan]:
    """Every site's plan: each story on one original site (``assign``) and republished on
    syndicating ones (``syndication.syndicate``)."""
    by_id = {doc.id: doc for doc in docs}
    sites = site_table()
    originals = [site for site in sites if site.kind in ORIGINAL_KINDS + ("aggregator",)]
    owned = assign(docs, originals, seed)
    owned |= syndicate(docs, [s for s in sites if s not in originals], seed, fraction)
    return [plan_site(site, by_id, owned[site.host], seed, prints) for site in sites]


@dataclass
class WirePlan:
    """Every site of a newswire web, the stories it serves and its links."""

    seed: int
    fraction: float
    sites: list[SitePlan]
    docs: dict[int, Story]  # the served (or, for a shadow web, sample) stories
    # (host, story) -> (own-site stories, mentioned (host, story) copies): ``links.neighbours``
    neighbours: dict[tuple[str, int], tuple] = field(default_factory=dict)
    # host -> (heading, hosts, with their newest stories): ``links.partner_blocks``
    partners: dict[str, list[tuple[str, list[str], bool]]] = field(default_factory=dict)
    by_host: dict[str, SitePlan] = field(init=False)
    host_of: dict[int, SitePlan] = field(init=False)
    _newest: dict[str, list[int]] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.by_host = {plan.host: plan for plan in self.sites}
        self.host_of = {doc_id: plan for plan in self.sites if plan.site.kind in ORIGINAL_KINDS
                        for doc_id in plan.section_of}  # where each story first ran

    def article_url(self, doc_id: int) -> str:
        plan = self.host_of[doc_id]
        return plan.url(plan.article_path(doc_id))

    def copy_url(self, host: str, doc_id: int) -> str:
        """The URL of ``doc_id`` on ``host`` (which carries it)."""
        plan = self.by_host[host]
        return plan.url(plan.article_path(doc_id))

    def newest_on(self, host: str, n: int) -> list[int]:
        """The ``n`` newest stories ``host`` carries, newest first."""
        if host not in self._newest:
            self._newest[host] = sorted(self.by_host[host].section_of,
                                        key=lambda d: (age(self.seed, d), d))[:LATEST_KEPT]
        return self._newest[host][:n]

    def of_kind(self, kind: str) -> list[SitePlan]:
        return [plan for plan in self.sites if plan.site.kind == kind]

    def desks(self, topic: str) -> list[SitePlan]:
        return [plan for plan in self.of_kind("desk") if plan.site.topic == topic]

    def newest(self, n: int, topic: str | None = None) -> list[int]:
        """The ``n`` newest served stories (of ``topic``), newest first."""
        ids = [d for d in self.host_of if topic is None or self.docs[d].topic == topic]
        return sorted(ids, key=lambda d: (age(self.seed, d), d))[:n]
