"""Topic directories of the newswire web: the real-text web's writer
(``jlse.sandbox.realweb.topicdir``) with this web's seeds, keywords and non-target pages."""

from __future__ import annotations

from typing import Any

from jlse.sandbox.realweb.topicdir import TopicRules

KEYWORDS = {  # hand-written, in the order a person would search
    "energy": ["oil", "crude", "opec", "barrels", "natural gas", "refinery", "petroleum",
               "gasoline", "energy", "oil prices", "drilling", "fuel"],
    "money": ["interest rates", "dollar", "yen", "central bank", "federal reserve",
              "money supply", "exchange rate", "bundesbank", "currency", "money market",
              "treasury", "prime rate"],
    "economy": ["gdp", "inflation", "consumer prices", "unemployment", "industrial production",
                "gross national product", "economy", "trade deficit", "recession", "jobs",
                "retail sales", "growth"],
    "trade": ["trade", "tariffs", "imports", "exports", "trade deficit", "protectionism",
              "gatt", "shipping", "port", "ships", "freight", "trade talks"],
    "commodities": ["coffee", "sugar", "cocoa", "grain", "wheat", "corn", "rubber",
                    "vegetable oil", "cotton", "crop", "harvest", "commodity"],
    "metals": ["gold", "copper", "aluminium", "steel", "tin", "zinc", "mining", "metal",
               "smelter", "ounces", "lead", "nickel"],
}
N_OUTLET_SEEDS = 2


def seeds(web: Any, topic: str) -> list[str]:
    """The home pages of the topic's first desk, of both aggregators and of two outlets."""
    chosen = web.plan.desks(topic)[:1] + web.plan.of_kind("aggregator")
    chosen += web.plan.of_kind("outlet")[:N_OUTLET_SEEDS]
    return [plan.url("/") for plan in chosen]


def nontarget(plan: Any, page: Any, truth: Any, topic: str) -> bool:
    """Category pages listing the topic's stories, and the home and about pages of its desks,
    journals and topic blog (as the 20 Newsgroups web takes its topical sites' home, section
    and about pages)."""
    if page.kind == "category":
        return truth is not None and truth.topic == topic
    return page.kind in ("home", "about") and plan.site.topic == topic


RULES = TopicRules(seeds, KEYWORDS, nontarget)
