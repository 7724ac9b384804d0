"""A crawlable topic directory from a discovery run (``jlse discover --topic-out DIR``).

The new topic has the source topic's settings, its seeds and the discovered ones, and its own
samples. With ``bootstrap`` (``--bootstrap-samples``) a missing class of samples is made up
from the run, which gives a keyword-only topic a trained page classifier (docs/algorithms.md
§4.3): discovery's top-ranked pages stand in as relevant samples, and discovered pages the
topic model (the keywords' VSM) judged irrelevant, drawn at random, as irrelevant ones. It is
not the default: on the sandbox the NB trained on them harvested less than the keywords' VSM
(docs/benchmarks.md, "Discovery").

``DIR/topic.toml``                the source topic's, as it is
``DIR/seeds.txt``                 the source topic's seeds, then the discovered ones
``DIR/samples/``                  the topic's own samples
``DIR/samples/relevant/*.html``   bootstrap, none of its own: discovery's top-ranked pages
``DIR/samples/irrelevant/*.html`` bootstrap, none of its own: pages judged irrelevant
``DIR/samples/bootstrap.json``    bootstrap: what was made up, from which run (``jlse train``)
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

from jlse.discovery.output import DiscoveryReport, PageRow
from jlse.topic import BOOTSTRAP_FILE

PSEUDO_POSITIVES = 30  # discovery's best pages taken as relevant samples
PSEUDO_NEGATIVES = 60  # pages judged irrelevant drawn as irrelevant samples


class TopicOutError(ValueError):
    """The directory cannot receive a topic (it holds files already)."""


def check_topic_out(out: Path, source: Path) -> None:
    """Refuse before discovery starts: an existing non-empty directory, or the source topic."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TopicOutError(f"--topic-out {out}: exists and is not an empty directory")
    if out.resolve() == source.resolve():
        raise TopicOutError("--topic-out must be a new directory, not the source topic")


def write_topic(out: Path, source: Path, report: DiscoveryReport, seeds: list[str],
                load_body: Callable[[str], bytes | None], relevance_threshold: float,
                run: str, bootstrap: bool = False) -> dict:
    """Write the topic directory ``out``; what was bootstrapped (also in bootstrap.json)."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "topic.toml", out / "topic.toml")
    (out / "seeds.txt").write_text("".join(f"{url}\n" for url in dict.fromkeys(seeds)),
                                   encoding="utf-8")
    samples = out / "samples"
    if not bootstrap:
        if (source / "samples").is_dir():
            shutil.copytree(source / "samples", samples)
        return {}
    samples.mkdir(exist_ok=True)
    summary: dict = {"source_topic": str(source), "discovery_run": run}
    own = {kind: _own_samples(source / "samples" / kind) for kind in ("relevant", "irrelevant")}
    positives = _best_pages(report.pages, relevance_threshold)
    negatives = _judged_irrelevant_sample(report.pages, relevance_threshold)
    for kind, rows in (("relevant", positives), ("irrelevant", negatives)):
        folder = samples / kind
        if own[kind]:
            shutil.copytree(source / "samples" / kind, folder)
            summary[kind] = {"from": "the source topic's samples", "pages": len(own[kind])}
        else:
            written = _write_pages(folder, rows, load_body)
            summary[kind] = {"from": _ORIGIN[kind], "pages": len(written), "urls": written}
    (samples / BOOTSTRAP_FILE).write_text(json.dumps(summary, indent=2, ensure_ascii=False),
                                          encoding="utf-8")
    return summary


_ORIGIN = {"relevant": "discovery's top-ranked pages (pseudo-positives)",
           "irrelevant": "random discovered pages the topic model judged irrelevant"}


def _own_samples(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.htm*")) if folder.is_dir() else []


def _best_pages(pages: list[PageRow], threshold: float) -> list[PageRow]:
    """The top-ranked pages the topic model did not judge irrelevant."""
    kept = [row for row in pages if row.relevance is None or row.relevance >= threshold]
    return kept[:PSEUDO_POSITIVES]


def _judged_irrelevant_sample(pages: list[PageRow], threshold: float) -> list[PageRow]:
    """Random pages among those the topic model judged irrelevant. Not random discovered
    pages: discovery is focused, and most of what it fetches is on the topic (82% on the
    sandbox), which made an NB trained on them worse than the keyword VSM."""
    judged_out = [row for row in pages if row.relevance is not None and row.relevance < threshold]
    return random.Random(0).sample(judged_out, min(PSEUDO_NEGATIVES, len(judged_out)))


def _write_pages(folder: Path, rows: list[PageRow],
                 load_body: Callable[[str], bytes | None]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for row in rows:
        body = load_body(row.url)
        if body:
            (folder / f"{len(written) + 1:03d}.html").write_bytes(body)
            written.append(row.url)
    return written
