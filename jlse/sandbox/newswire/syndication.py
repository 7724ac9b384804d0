"""Syndication: the sites that republish, quote or summarise the wire's stories, and which
copies each carries (76 sites beside the 20 of ``plan``).

A wire story is picked up by several sites, as newswire really is. The ground truth of a copy
is its story's label. Kinds:

- ``regional``: 36 local papers republishing stories of every topic in three coarse sections
  (Business, Markets, World: mixed-topic sections), each with its own mix of topics;
- ``journal``: two trade journals per crawl topic, mostly on it, some stories of the topics
  whose vocabulary it shares (energy - commodities - metals; money - economy - trade) and
  company news;
- ``blog``: one blog per crawl topic quoting its stories, and 12 market-chatter blogs
  quoting mostly company news (topic ``hub``);
- ``portal``: ten investor portals republishing earnings and acquisitions (off-topic sites).

Copies per story: ``CRAWL_COPIES`` per crawl topic in all (times the web's fraction), spread
over its stories, so that a topic has far more relevant pages than a 1,000-page crawl can
fetch; ``CORPORATE_COPIES`` per earnings or acquisitions story, so that the off-topic bulk
stays larger. Nothing here renders text.
"""

from __future__ import annotations

import math
import random

from jlse.sandbox.newswire.corpus import CORPORATE, CRAWL_TOPICS, Story

TOWNS = ("avonford", "bexley", "carrow", "dunmore", "eastbrook", "fairhaven", "glenwood",
         "harlow", "ironbridge", "juniper", "kingsport", "lakeside", "millbrook", "northgate",
         "oakham", "pinecrest", "queensbury", "riverton", "stonebridge", "thornbury",
         "upton", "valemont", "westfield", "yarmouth", "ashby", "brampton", "clifton",
         "denholm", "elmstead", "fernley", "greystone", "hollis", "kelso", "larchmont",
         "marlow", "newbury")
PAPERS = ("gazette", "herald", "courier", "chronicle", "tribune", "observer")
JOURNALS = {
    "energy": (("petroleum-intelligence.wire", "Petroleum Intelligence"),
               ("gas-and-power.wire", "Gas and Power Journal")),
    "money": (("treasury-letter.wire", "The Treasury Letter"),
              ("currency-journal.wire", "Currency Journal")),
    "economy": (("macro-review.wire", "Macro Review"),
                ("indicator-weekly.wire", "Indicator Weekly")),
    "trade": (("freight-journal.wire", "Freight Journal"), ("tariff-report.wire", "Tariff Report")),
    "commodities": (("grain-and-softs.wire", "Grain and Softs"),
                    ("farm-markets.wire", "Farm Markets Journal")),
    "metals": (("mining-journal.wire", "Mining Journal"), ("bullion-letter.wire", "Bullion Letter")),
}
TOPIC_BLOGS = {"energy": ("oil-patch-notes.wire", "Oil Patch Notes"),
               "money": ("rate-watcher.wire", "Rate Watcher"),
               "economy": ("dismal-notes.wire", "Dismal Notes"),
               "trade": ("dockside-blog.wire", "Dockside"),
               "commodities": ("crop-talk.wire", "Crop Talk"),
               "metals": ("gold-bug.wire", "The Gold Bug")}
CHATTER_BLOGS = (("stock-chatter.wire", "Stock Chatter"), ("deal-junkie.wire", "Deal Junkie"),
                 ("the-bull-pen.wire", "The Bull Pen"), ("ticker-talk.wire", "Ticker Talk"),
                 ("small-caps.wire", "Small Caps"), ("street-gossip.wire", "Street Gossip"),
                 ("payout-watch.wire", "Payout Watch"), ("merger-mania.wire", "Merger Mania"),
                 ("quarterly-beat.wire", "Quarterly Beat"), ("value-hunter.wire", "Value Hunter"),
                 ("broker-notes.wire", "Broker Notes"), ("tape-reader.wire", "The Tape Reader"))
PORTALS = (("investor-daily.wire", "Investor Daily"), ("shareholder.wire", "The Shareholder"),
           ("market-wrap.wire", "Market Wrap"), ("equity-post.wire", "Equity Post"),
           ("stock-digest.wire", "Stock Digest"), ("capital-news.wire", "Capital News"),
           ("bourse-report.wire", "Bourse Report"), ("dividend-times.wire", "Dividend Times"),
           ("company-wire.wire", "Company Wire"), ("bluechip-news.wire", "Bluechip News"))
SHARED_VOCABULARY = {"energy": ("commodities", "metals"), "commodities": ("energy", "metals"),
                     "metals": ("energy", "commodities"), "money": ("economy", "trade"),
                     "economy": ("money", "trade"), "trade": ("economy", "money")}
CRAWL_COPIES = 1450  # copies of a crawl topic's stories, at fraction 1
CORPORATE_COPIES = 2.5  # copies of an earnings or acquisitions story, on average
# the share of a topic's copies each kind of site takes (spread over its sites)
CRAWL_SHARES = {"regional": 0.45, "journal": 0.30, "shared": 0.06, "blog": 0.11, "chatter": 0.05}
CORPORATE_SHARES = {"portal": 0.45, "regional": 0.25, "journal": 0.10, "chatter": 0.20}
MIX_SIGMA = 0.9  # how much a regional paper's interest in a topic varies (log-normal)
REGIONAL_SECTIONS = {"earnings": "business", "acquisitions": "business", "economy": "business",
                     "money": "markets", "metals": "markets", "commodities": "markets",
                     "trade": "world", "energy": "world"}
SECTION_LABELS = {"business": "Business", "markets": "Markets", "world": "World news",
                  "companies": "Company news", "results": "Results", "deals": "Deals",
                  "posts": "Posts", "news": "Latest news"}


def regional_sites() -> list[tuple[str, str]]:
    return [(f"{town}-{PAPERS[n % len(PAPERS)]}.wire",
             f"The {town.title()} {PAPERS[n % len(PAPERS)].title()}")
            for n, town in enumerate(TOWNS)]


def syndicated_table(make) -> list:
    """The syndicating sites, built by ``make(host, name, kind, topic, index)``."""
    sites = [make(host, name, "regional", "hub", n) for n, (host, name) in
             enumerate(regional_sites())]
    sites += [make(host, name, "journal", topic, n) for topic in CRAWL_TOPICS
              for n, (host, name) in enumerate(JOURNALS[topic])]
    sites += [make(*TOPIC_BLOGS[topic], "blog", topic, n) for n, topic in enumerate(CRAWL_TOPICS)]
    sites += [make(host, name, "blog", "hub", n) for n, (host, name) in enumerate(CHATTER_BLOGS)]
    sites += [make(host, name, "portal", "hub", n) for n, (host, name) in enumerate(PORTALS)]
    return sites


def _role(site, topic: str) -> str | None:
    """Which share of ``topic``'s copies ``site`` draws from (None: it carries none)."""
    kind, own = site.kind, site.topic
    if topic in CORPORATE:
        return {"regional": "regional", "journal": "journal", "portal": "portal"}.get(
            kind, "chatter" if kind == "blog" and own == "hub" else None)
    if kind == "regional":
        return "regional"
    if kind == "journal":
        return "journal" if own == topic else "shared" if topic in SHARED_VOCABULARY[own] else None
    if kind == "blog":
        return "chatter" if own == "hub" else "blog" if own == topic else None
    return None


def _weights(sites: list, topic: str, seed: int) -> list[tuple[str, float]]:
    """(host, weight) of every site carrying ``topic``: its role's share over the role's sites,
    a regional paper's times its own interest in the topic."""
    shares = CORPORATE_SHARES if topic in CORPORATE else CRAWL_SHARES
    roles = [(site, _role(site, topic)) for site in sites]
    counts: dict[str, int] = {}
    for _, role in roles:
        if role:
            counts[role] = counts.get(role, 0) + 1
    out = []
    for site, role in roles:
        if role is None:
            continue
        weight = shares[role] / counts[role]
        if site.kind == "regional":
            weight *= random.Random(f"{seed}|mix|{site.host}|{topic}").lognormvariate(0,
                                                                                       MIX_SIGMA)
        out.append((site.host, weight))
    return out


def syndicate(docs: list[Story], sites: list, seed: int, fraction: float) -> dict[str, list[int]]:
    """host -> the stories it republishes (each story at most once per site)."""
    rng = random.Random(f"{seed}|syndicate")
    out: dict[str, list[int]] = {site.host: [] for site in sites}
    for topic in CRAWL_TOPICS + CORPORATE:
        ids = sorted(doc.id for doc in docs if doc.topic == topic)
        if not ids:
            continue
        per_story = (CORPORATE_COPIES if topic in CORPORATE
                     else CRAWL_COPIES * fraction / len(ids))
        weighted = _weights(sites, topic, seed)
        for doc_id in ids:
            n = min(len(weighted), int(per_story) + (rng.random() < per_story % 1))
            # weighted sampling without replacement (Efraimidis-Spirakis keys)
            keys = sorted(((math.log(rng.random() or 1e-12) / w, host) for host, w in weighted),
                          reverse=True)
            for _, host in keys[:n]:
                out[host].append(doc_id)
    return out


def section_of_copy(site, doc: Story) -> tuple[str, str]:
    """(slug, label) of the section a syndicating site files a story in."""
    if site.kind == "regional":
        slug = REGIONAL_SECTIONS[doc.topic]
    elif site.kind == "journal":
        slug = "companies" if doc.topic in CORPORATE else "news" if doc.topic == site.topic \
            else doc.topic
    elif site.kind == "portal":
        slug = "results" if doc.topic == "earnings" else "deals"
    else:
        slug = "posts"
    return slug, SECTION_LABELS.get(slug, slug.title())
