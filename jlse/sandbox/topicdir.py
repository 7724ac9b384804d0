"""Write a topic directory for a crawl topic of the sandbox web.

Sample pages come from a *shadow* web: the same sites and generators under another seed, so
the samples look like the served pages without being any of them.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urljoin

import lxml.html

from jlse.sandbox.generator import PageSpec, SitePlan, WebPlan
from jlse.sandbox.layout import UTF8_META
from jlse.sandbox.vocab import LANGUAGES

log = logging.getLogger(__name__)

N_SEEDS = 6
MAX_TOPIC_SEEDS = 3  # the rest are hub home pages
ANCHORS_PER_SAMPLE = 3  # anchors.tsv holds ~3 * n_samples lines per label
SHADOW_SEED_SALT = 1_000_003

PageRef = tuple[SitePlan, PageSpec]


# What a topic directory needs of a SandboxWeb: web.py imports this module, not the reverse.
class _Truth(Protocol):
    @property
    def topic(self) -> str: ...


class SandboxPages(Protocol):
    plan: WebPlan
    seed: int
    topics: list[str]

    def truth(self, url: str) -> _Truth | None: ...

    def render_html(self, site: SitePlan, page: PageSpec, head_meta: str) -> str: ...


def _seeds(web: SandboxPages, topic: str) -> list[str]:
    """Home pages of non-hidden, crawlable topic sites, topped up with hub home pages."""
    topic_sites = [site for site in web.plan.of_topic(topic, include_hidden=False)
                   if site.spec.crawlable and not site.spec.small]
    hubs = sorted(web.plan.hubs, key=lambda hub: hub.spec.hub_kind != "portal")
    chosen = topic_sites[:MAX_TOPIC_SEEDS] + hubs
    return [site.url("/") for site in chosen[:N_SEEDS]]


def _keywords(topic: str) -> list[str]:
    keywords = [LANGUAGES["en"].topics[topic].label.lower()]
    for language in LANGUAGES.values():
        if topic in language.topics:
            keywords += language.topics[topic].keywords
    return list(dict.fromkeys(keywords))


def _topic_toml(topic: str) -> str:
    keywords = ", ".join(json.dumps(word, ensure_ascii=False) for word in _keywords(topic))
    return f"name = {json.dumps(topic)}\nkeywords = [{keywords}]\n"


def _pages(shadow: SandboxPages, accept: Callable[[SitePlan, PageSpec], bool]) -> list[PageRef]:
    return [(site, page) for site in shadow.plan.sites for page in site.pages.values()
            if accept(site, page)]


def _sample_sets(shadow: SandboxPages, topic: str, rng: random.Random, n: int) -> dict[str, list[PageRef]]:
    def on_topic(site: SitePlan, page: PageSpec) -> bool:
        return site.spec.topic == topic and page.kind not in ("admin", "print")

    picks = {
        "relevant": _pages(shadow, on_topic),
        "irrelevant": _pages(shadow, lambda site, page: site.spec.kind in ("distractor", "hub")
                             and page.kind not in ("admin", "print")),
        "target": _pages(shadow, lambda site, page: on_topic(site, page) and page.is_target),
        "nontarget": _pages(shadow, lambda site, page: on_topic(site, page)
                            and page.kind in ("home", "list", "about", "contact")),
    }
    return {label: rng.sample(pool, min(n, len(pool))) for label, pool in picks.items()}


def _anchors(shadow: SandboxPages, topic: str, html: str, url: str) -> list[tuple[str, str]]:
    """(label, anchor text) of the links of one page whose target page has a known topic."""
    rows = []
    for element in lxml.html.fromstring(html).iter("a"):
        href = element.get("href")
        text = " ".join(element.text_content().split() + [img.get("alt", "")
                                                          for img in element.iter("img")]).strip()
        truth = shadow.truth(urljoin(url, href)) if href else None
        if truth is None or not text or text.isdigit():
            continue
        rows.append(("relevant" if truth.topic == topic else "irrelevant", text))
    return rows


def _write_anchors(path: Path, rows: list[tuple[str, str]], rng: random.Random, n: int) -> None:
    lines = []
    for label in ("relevant", "irrelevant"):
        texts = list(dict.fromkeys(text for row_label, text in rows if row_label == label))
        for text in rng.sample(texts, min(n * ANCHORS_PER_SAMPLE, len(texts))):
            lines.append(f"{label}\t{' '.join(text.split())}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def start_topic_dir(out_dir: Path, topic: str, topics: list[str], seeds: list[str],
                    toml: str, n_samples: int, web_name: str) -> None:
    """Check ``topic`` and ``n_samples``, then write seeds.txt and topic.toml into ``out_dir``."""
    if topic not in topics:
        raise ValueError(f"unknown topic {topic!r}; the {web_name} topics are {topics}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be at least 1, got {n_samples}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "seeds.txt").write_text("\n".join(seeds) + "\n", encoding="utf-8")
    (out_dir / "topic.toml").write_text(toml, encoding="utf-8")


def write_samples(out_dir: Path, sets: dict[str, list[tuple[Any, Any]]],
                  render: Callable[[Any, Any], str], shadow: Any, topic: str,
                  rng: random.Random, n_samples: int) -> None:
    """samples/LABEL/NNNN.html for each (site, page) of ``sets`` (``render`` gives the HTML;
    ``site.url(page.path)`` its URL) and samples/anchors.tsv from the relevant and irrelevant
    ones (``shadow.truth`` labels the links)."""
    anchor_rows: list[tuple[str, str]] = []
    for label, refs in sets.items():
        folder = out_dir / "samples" / label
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.html"):
            old.unlink()
        for number, (site, page) in enumerate(refs, start=1):
            html = render(site, page)
            (folder / f"{number:04d}.html").write_text(html, encoding="utf-8")
            if label in ("relevant", "irrelevant"):
                anchor_rows += _anchors(shadow, topic, html, site.url(page.path))
    _write_anchors(out_dir / "samples" / "anchors.tsv", anchor_rows, rng, n_samples)


def write_topic_dir(web: SandboxPages, build_web: Callable[..., SandboxPages], topic: str,
                    out_dir: Path, n_samples: int = 20, keywords_only: bool = False) -> Path:
    """Seeds, topic.toml and n_samples sample pages of each kind, plus anchors.tsv; with
    ``keywords_only`` seeds and topic.toml only.

    ``build_web(seed=, scale=)`` builds the shadow web the samples come from."""
    start_topic_dir(out_dir, topic, web.topics, _seeds(web, topic), _topic_toml(topic),
                    n_samples, "sandbox")
    if keywords_only:
        log.info("sandbox: wrote topic directory %s for %s (keywords only)", out_dir, topic)
        return out_dir
    shadow = build_web(seed=web.seed * 7919 + SHADOW_SEED_SALT, scale=1.0)
    rng = random.Random(f"{web.seed}|samples|{topic}")
    write_samples(out_dir, _sample_sets(shadow, topic, rng, n_samples),
                  lambda site, page: shadow.render_html(site, page, UTF8_META), shadow, topic,
                  rng, n_samples)
    log.info("sandbox: wrote topic directory %s for %s", out_dir, topic)
    return out_dir
