"""Write a topic directory for a topic of the real-text web, laid out like the sandbox's
(``jlse.sandbox.topicdir``): seeds.txt, topic.toml, samples/{relevant,irrelevant,target,
nontarget}/NNNN.html and samples/anchors.tsv.

Sample pages come from a *shadow* web built the same way from the corpus's test split, so they
read like the served pages without being any of them.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from jlse.sandbox.realweb.plan import Page, RealPlan, SitePlan
from jlse.sandbox.served import PageTruth
from jlse.sandbox.topicdir import start_topic_dir, write_samples

log = logging.getLogger(__name__)

N_TOPIC_SEEDS = 2  # the forum and the digest; portals and directories make up the rest
KEYWORDS = {  # hand-written, in the order a person would search
    "comp": ["computer", "software", "hardware", "windows", "graphics", "pc", "mac", "disk",
             "driver", "monitor", "dos", "program"],
    "rec": ["car", "motorcycle", "bike", "baseball", "hockey", "team", "game", "season",
            "player", "engine", "ride", "playoffs"],
    "sci": ["science", "space", "nasa", "encryption", "crypto", "clipper", "electronics",
            "circuit", "medicine", "doctor", "disease", "research"],
    "politics": ["politics", "government", "gun control", "guns", "israel", "armenian", "law",
                 "rights", "president", "clinton", "war", "policy"],
    "religion": ["religion", "god", "jesus", "christian", "bible", "church", "faith", "atheism",
                 "atheist", "belief", "christ", "morality"],
    "forsale": ["for sale", "sale", "sell", "price", "offer", "shipping", "condition", "obo",
                "wanted", "brand new", "asking", "best offer"],
}

PageRef = tuple[SitePlan, Page]


class _Web(Protocol):
    plan: RealPlan
    seed: int
    topics: list[str]

    def truth(self, url: str) -> PageTruth | None: ...

    def render(self, site: SitePlan, page: Page) -> str: ...


def seeds(web: _Web, topic: str) -> list[str]:
    """Home pages of the topic's forum and digest, of two portals and of both directories."""
    chosen = [plan for plan in web.plan.topical(topic) if plan.site.seeded][:N_TOPIC_SEEDS]
    chosen += web.plan.of_kind("portal")[:2] + web.plan.of_kind("directory")
    return [plan.url("/") for plan in chosen]


def topic_toml(topic: str, keywords: dict[str, list[str]] = KEYWORDS) -> str:
    words = ", ".join(json.dumps(word) for word in keywords[topic])
    return f"name = {json.dumps(topic)}\nkeywords = [{words}]\n"


def _real_nontarget(plan: Any, page: Any, truth: Any, topic: str) -> bool:
    return plan.site.topic == topic and page.kind in ("home", "section", "about")


@dataclass(frozen=True)
class TopicRules:
    """What a real-text web's topic directories take from the web: its seeds, its keywords and
    which shadow pages are a topic's non-target samples."""

    seeds: Callable[[Any, str], list[str]]
    keywords: dict[str, list[str]]
    nontarget: Callable[[Any, Any, Any, str], bool]  # (site plan, page, truth, topic)


def _sample_sets(shadow: _Web, topic: str, rng: random.Random, n: int,
                 negatives: str = "random", rules: TopicRules | None = None,
                 ) -> dict[str, list[PageRef]]:
    rules = rules or REAL_RULES
    refs = [(plan, page, shadow.truth(plan.url(page.path)))
            for plan in shadow.plan.sites for page in plan.pages.values()]
    picks = {
        "relevant": [(p, g) for p, g, t in refs if t and t.topic == topic],
        "irrelevant": [(p, g) for p, g, t in refs if t and t.topic != topic],
        "target": [(p, g) for p, g, t in refs if t and t.topic == topic and t.is_target],
        "nontarget": [(p, g) for p, g, t in refs if rules.nontarget(p, g, t, topic)],
    }
    chosen = {label: rng.sample(pool, min(n, len(pool))) for label, pool in picks.items()}
    if negatives == "stratified":
        chosen["irrelevant"] = _stratified(refs, topic, rng, n, rules.keywords)
    return chosen


def _stratified(refs: list, topic: str, rng: random.Random, n: int,
                keywords: dict[str, list[str]] = KEYWORDS) -> list[PageRef]:
    """``n`` irrelevant pages, as many from each other topic as ``n`` allows."""
    by_topic: dict[str, list[PageRef]] = {}
    for plan, page, truth in refs:
        if truth and truth.topic != topic and truth.topic in keywords:
            by_topic.setdefault(truth.topic, []).append((plan, page))
    others = sorted(by_topic)
    picked = []
    for i, other in enumerate(others):
        share = n // len(others) + (i < n % len(others))
        picked += rng.sample(by_topic[other], min(share, len(by_topic[other])))
    return picked


REAL_RULES = TopicRules(seeds, KEYWORDS, _real_nontarget)


def write_topic_dir(web: _Web, shadow: Callable[[], _Web], topic: str, out_dir: Path,
                    n_samples: int = 20, keywords_only: bool = False,
                    negatives: str = "random", rules: TopicRules = REAL_RULES) -> Path:
    """Seeds, topic.toml and ``n_samples`` sample pages of each kind plus anchors.tsv; with
    ``keywords_only`` seeds and topic.toml only. ``shadow()`` gives the test-split web;
    ``negatives``: see ``RealWeb.negatives``; ``rules``: the web's seeds, keywords and
    non-target pages (the 20 Newsgroups web's by default)."""
    start_topic_dir(out_dir, topic, web.topics, rules.seeds(web, topic),
                    topic_toml(topic, rules.keywords), n_samples, "real web's")
    if keywords_only:
        log.info("real web: wrote topic directory %s for %s (keywords only)", out_dir, topic)
        return out_dir
    samples = shadow()
    rng = random.Random(f"{web.seed}|samples|{topic}")
    write_samples(out_dir, _sample_sets(samples, topic, rng, n_samples, negatives, rules),
                  samples.render,
                  samples, topic, rng, n_samples)
    log.info("real web: wrote topic directory %s for %s", out_dir, topic)
    return out_dir
