"""The structure of the real-text web: its sites, which documents each carries, and its pages.

Sites (all ``*.real``): three topical sites per topic (``{topic}-forum``, ``-digest``,
``-archive``; ~85% of their articles on the topic), three general portals carrying every topic,
two directories linking home pages, and an advert network. Each served (train) document is an
article of exactly one site. Nothing here renders text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from jlse.sandbox.realweb.corpus import TOPICS, Doc, topic_of

STYLES = ("forum", "digest", "archive")  # topical sites of a topic, in this order
PORTALS = (("usenet-daily.real", "Usenet Daily"), ("netnews-today.real", "Netnews Today"),
           ("the-post.real", "The Post"))
DIRECTORIES = (("webdir.real", "The Web Directory"), ("linkring.real", "LinkRing"))
ADS_HOST, ADS_NAME, N_OFFERS = "adnet.real", "AdNet", 12
TOPIC_NAMES = {"comp": "Computing", "rec": "Recreation", "sci": "Science",
               "politics": "Politics", "religion": "Religion", "forsale": "Marketplace"}
RELATED_TOPIC = {"comp": "forsale", "forsale": "comp", "sci": "comp", "rec": "forsale",
                 "politics": "religion", "religion": "politics"}
SECTIONS = {  # newsgroup -> (slug, label): the sections of a topical site
    "comp.graphics": ("graphics", "Graphics"), "comp.os.ms-windows.misc": ("windows", "MS Windows"),
    "comp.sys.ibm.pc.hardware": ("pc-hardware", "PC hardware"),
    "comp.sys.mac.hardware": ("mac-hardware", "Mac hardware"),
    "comp.windows.x": ("x-window", "X Window System"), "misc.forsale": ("forsale", "For sale"),
    "rec.autos": ("autos", "Cars"), "rec.motorcycles": ("motorcycles", "Motorcycles"),
    "rec.sport.baseball": ("baseball", "Baseball"), "rec.sport.hockey": ("hockey", "Hockey"),
    "sci.crypt": ("crypto", "Cryptography"), "sci.electronics": ("electronics", "Electronics"),
    "sci.med": ("medicine", "Medicine"), "sci.space": ("space", "Space"),
    "alt.atheism": ("atheism", "Atheism"), "soc.religion.christian": ("christianity", "Christianity"),
    "talk.religion.misc": ("religion", "Religion (misc)"), "talk.politics.guns": ("guns", "Guns"),
    "talk.politics.mideast": ("mideast", "Middle East"), "talk.politics.misc": ("politics", "Politics (misc)"),
}
GENERAL_SHARE = 0.25  # documents on the portals
OFF_TOPIC_SHARE = 0.15  # of a topical site's articles
SITE_WEIGHTS = (0.40, 0.35, 0.25)  # forum, digest, archive: sizes differ
PAGE_SIZE = 20  # links per section page


@dataclass(frozen=True)
class RealSite:
    host: str
    name: str
    kind: str  # topic | portal | directory | ads
    topic: str  # the topic of a topical site; "hub" otherwise
    style: str  # forum | digest | archive | portal | directory | ads
    index: int = 0  # 0-2 among the sites of its kind (and topic)
    disallow: tuple[str, ...] = ()  # robots.txt Disallow paths for every user agent
    crawl_delay: int = 0

    @property
    def seeded(self) -> bool:
        """Topical sites the seeds and the first directory list (archives are found later)."""
        return self.kind == "topic" and self.style != "archive"


@dataclass(frozen=True, slots=True)
class Page:
    kind: str  # home | section | article | about | category | offer
    path: str
    key: int = -1  # section index (section), document id (article), topic index, offer
    number: int = 1  # page number of a section page


@dataclass
class Section:
    slug: str
    label: str
    topic: str
    docs: list[int] = field(default_factory=list)  # newest first

    def n_pages(self) -> int:
        return max(1, -(-len(self.docs) // PAGE_SIZE))


@dataclass
class SitePlan:
    site: RealSite
    sections: list[Section] = field(default_factory=list)
    pages: dict[str, Page] = field(default_factory=dict)
    section_of: dict[int, int] = field(default_factory=dict)  # doc id -> section index

    @property
    def host(self) -> str:
        return self.site.host

    def url(self, path: str) -> str:
        return f"http://{self.site.host}{path}"

    def section_path(self, index: int, number: int = 1) -> str:
        slug, style = self.sections[index].slug, self.site.style
        if style == "forum":
            return f"/forum/{slug}/" + ("" if number == 1 else f"page-{number}.html")
        if style == "digest":
            return f"/{slug}/" + ("" if number == 1 else f"?page={number}")
        if style == "archive":
            return f"/archive/{slug}/" + ("" if number == 1 else f"index-{number}.html")
        return f"/news/{slug}/" + ("" if number == 1 else f"{number}.html")

    def article_path(self, doc_id: int) -> str:
        style = self.site.style
        if style == "forum":
            return f"/thread/{doc_id}.html"
        slug = self.sections[self.section_of[doc_id]].slug
        if style == "digest":
            return f"/{slug}/{doc_id}.html"
        if style == "archive":
            return f"/archive/{slug}/msg{doc_id}.html"
        return f"/story/{doc_id}.html"

    def about_path(self) -> str:
        return {"digest": "/about/", "archive": "/info.html"}.get(self.site.style, "/about.html")

    def page_of(self, doc_id: int) -> int:
        """The number of the section page that lists ``doc_id``."""
        return self.sections[self.section_of[doc_id]].docs.index(doc_id) // PAGE_SIZE + 1

    def disallowed(self, path: str) -> bool:
        return any(path.startswith(prefix) for prefix in self.site.disallow)


def site_table() -> list[RealSite]:
    sites = []
    for topic in TOPICS:
        for index, style in enumerate(STYLES):
            host = f"{topic}-{style}.real"
            sites.append(RealSite(
                host, f"{TOPIC_NAMES[topic]} {style.title()}", "topic", topic, style, index,
                disallow=("/mideast/",) if host == "politics-digest.real" else (),
                crawl_delay=1 if host == "forsale-archive.real" else 0))
    sites += [RealSite(host, name, "portal", "hub", "portal", i)
              for i, (host, name) in enumerate(PORTALS)]
    sites += [RealSite(host, name, "directory", "hub", "directory", i)
              for i, (host, name) in enumerate(DIRECTORIES)]
    sites.append(RealSite(ADS_HOST, ADS_NAME, "ads", "hub", "ads"))
    return sites


def stratified_slice(docs: list[Doc], fraction: float, seed: int) -> list[Doc]:
    """A deterministic ``fraction`` of every newsgroup (at least one document each)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if fraction == 1:
        return list(docs)
    by_label: dict[str, list[Doc]] = {}
    for doc in docs:
        by_label.setdefault(doc.label, []).append(doc)
    kept = []
    for label in sorted(by_label):
        group = by_label[label]
        random.Random(f"{seed}|slice|{label}").shuffle(group)
        kept += group[:max(1, round(fraction * len(group)))]
    return sorted(kept, key=lambda doc: doc.id)


def assign(docs: list[Doc], sites: list[RealSite], seed: int) -> dict[str, list[int]]:
    """host -> ids of its articles: a quarter of each topic to the portals, the rest to the
    topic's sites, each of which also takes ~15% off-topic articles from other topics."""
    rng = random.Random(f"{seed}|assign")
    topical = {(s.topic, s.index): s.host for s in sites if s.kind == "topic"}
    portals = [s.host for s in sites if s.kind == "portal"]
    out: dict[str, list[int]] = {s.host: [] for s in sites}
    migrants: dict[str, list[int]] = {}
    general: list[int] = []
    for topic in TOPICS:
        ids = [doc.id for doc in docs if doc.topic == topic]
        rng.shuffle(ids)
        n_general = round(GENERAL_SHARE * len(ids))
        general += ids[:n_general]
        rest = ids[n_general:]
        n_migrants = round(OFF_TOPIC_SHARE * len(rest))
        migrants[topic], own = rest[:n_migrants], rest[n_migrants:]
        start = 0
        for index, weight in enumerate(SITE_WEIGHTS):
            end = len(own) if index == len(SITE_WEIGHTS) - 1 else start + round(weight * len(own))
            out[topical[topic, index]] += own[start:end]
            start = end
    need = {key: round(len(out[host]) * OFF_TOPIC_SHARE / (1 - OFF_TOPIC_SHARE))
            for key, host in topical.items()}
    while any(need.values()):  # one article per site and round, so no site goes short
        for (topic, index), host in sorted(topical.items()):
            pools = [t for t in TOPICS if t != topic and migrants[t]]
            if not need[topic, index] or not pools:
                need[topic, index] = 0
                continue
            chosen = rng.choices(pools, weights=[len(migrants[t]) for t in pools])[0]
            out[host].append(migrants[chosen].pop())
            need[topic, index] -= 1
    general += [doc_id for topic in TOPICS for doc_id in migrants[topic]]
    rng.shuffle(general)
    for number, doc_id in enumerate(general):
        out[portals[number % len(portals)]].append(doc_id)
    return out


def _sections(site: RealSite, docs: dict[int, Doc], ids: list[int]) -> list[Section]:
    if site.kind == "portal":
        sections = [Section(topic, TOPIC_NAMES[topic], topic) for topic in TOPICS]
        for doc_id in ids:
            sections[TOPICS.index(docs[doc_id].topic)].docs.append(doc_id)
        return [section for section in sections if section.docs]
    labels = sorted(label for label in SECTIONS if topic_of(label) == site.topic)
    sections = [Section(*SECTIONS[label], site.topic) for label in labels]
    for doc_id in ids:  # off-topic articles land in a section picked by their id
        label = docs[doc_id].label
        at = labels.index(label) if label in labels else doc_id % len(labels)
        sections[at].docs.append(doc_id)
    return [section for section in sections if section.docs]


def plan_site(site: RealSite, docs: dict[int, Doc], ids: list[int], seed: int) -> SitePlan:
    """A site's sections (newest article first) and its page table."""
    ordered = sorted(ids, key=lambda doc_id: random.Random(f"{seed}|date|{doc_id}").random())
    plan = SitePlan(site, _sections(site, docs, ordered) if ordered else [])
    for index, section in enumerate(plan.sections):
        for doc_id in section.docs:
            plan.section_of[doc_id] = index
    pages = [Page("home", "/")]
    if site.kind == "directory":
        pages += [Page("category", f"/cat/{topic}.html", n) for n, topic in enumerate(TOPICS)]
    if site.kind == "ads":
        pages += [Page("offer", f"/offer/{n}.html", n) for n in range(1, N_OFFERS + 1)]
    for index, section in enumerate(plan.sections):
        pages += [Page("section", plan.section_path(index, number), index, number)
                  for number in range(1, section.n_pages() + 1)]
        pages += [Page("article", plan.article_path(doc_id), doc_id) for doc_id in section.docs]
    pages.append(Page("about", plan.about_path()))
    plan.pages = {page.path: page for page in pages}
    return plan


def plan_sites(docs: list[Doc], seed: int) -> list[SitePlan]:
    by_id = {doc.id: doc for doc in docs}
    sites = site_table()
    owned = assign(docs, sites, seed)
    return [plan_site(site, by_id, owned[site.host], seed) for site in sites]


@dataclass
class RealPlan:
    """Every site of a real-text web, the documents it serves and its text links."""

    seed: int
    fraction: float
    sites: list[SitePlan]
    docs: dict[int, Doc]  # the served (or, for a shadow web, sample) documents
    neighbours: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    by_host: dict[str, SitePlan] = field(init=False)
    host_of: dict[int, SitePlan] = field(init=False)

    def __post_init__(self) -> None:
        self.by_host = {plan.host: plan for plan in self.sites}
        self.host_of = {doc_id: plan for plan in self.sites for doc_id in plan.section_of}

    def article_url(self, doc_id: int) -> str:
        plan = self.host_of[doc_id]
        return plan.url(plan.article_path(doc_id))

    def of_kind(self, kind: str) -> list[SitePlan]:
        return [plan for plan in self.sites if plan.site.kind == kind]

    def topical(self, topic: str) -> list[SitePlan]:
        return [plan for plan in self.of_kind("topic") if plan.site.topic == topic]
