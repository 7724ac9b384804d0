"""Where a crawl's pages went, by the ground truth: ``jlse eval``'s "where the pages went".

Efficiency says how far a crawl is from the oracle, not why. Of the first N pages requested
(N: the largest checkpoint) this counts:

- *on the topic*: pages of the topic (what the harvest rate counts);
- *taken for the topic*: pages off the topic that the crawl's classifier judged relevant,
  with the true topics they came from (the classifier's errors: irrelevant samples of those
  topics are what teaches it the difference);
- *judged off the topic*: pages off the topic judged irrelevant (hubs, listings, the pages the
  link ranking bet on and lost: the ranking's and exploration's cost);
- *no page*: requests that gave no page to judge (redirects, errors);
- *missed*: pages on the topic that the classifier judged irrelevant (counted in *on the
  topic*; their links wait as an irrelevant page's do).

and, of the topic's pages in the web, those *known* at the end of the crawl (linked from a page
it fetched) but not fetched, and those it never learnt of (*unknown*): a crawl with many known
ones ranks them too low; one with many unknown ones did not reach where they are.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from jlse.records import UNCOUNTED_OUTCOMES

TOP_TOPICS = 3  # the true topics of the pages taken for the topic, most frequent first


def page_losses(db_path: Path, topic_of: Mapping[str, str], key: Callable[[str], str],
                topic: str, pages: int, threshold: float) -> dict[str, Any]:
    """The counts of the module docstring for the first ``pages`` pages of the crawl in
    ``db_path``: ``topic_of`` the ground truth's topic of each ``key(url)``, relevance >=
    ``threshold`` judged relevant."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        requests = counted_requests(conn)[:pages]
        linked = {key(url) for (url,) in conn.execute("SELECT url FROM links")}
    finally:
        conn.close()
    counts: Counter[str] = Counter()
    taken_from: Counter[str] = Counter()
    fetched: set[str] = set()
    for url, outcome, relevance in requests:
        page = key(url)
        fetched.add(page)
        kind, true_topic = _kind(topic_of.get(page), topic, outcome, relevance, threshold)
        counts[kind] += 1
        if kind == "taken_for_topic":
            taken_from[true_topic] += 1
        elif kind == "on_topic" and relevance is not None and relevance < threshold:
            counts["missed"] += 1
    of_topic = _pages_of(topic_of.items(), topic)
    return {
        "pages": len(requests), "on_topic": counts["on_topic"],
        "taken_for_topic": counts["taken_for_topic"],
        "taken_from": dict(taken_from.most_common(TOP_TOPICS)),
        "judged_off_topic": counts["judged_off_topic"], "no_page": counts["no_page"],
        "missed": counts["missed"], "topic_pages": len(of_topic),
        "known_not_fetched": len((of_topic & linked) - fetched),
        "unknown": len(of_topic - linked - fetched),
    }


def counted_requests(conn: sqlite3.Connection) -> list[tuple[str, str, float | None]]:
    """(URL, outcome, judged relevance) of each request that counts against the page budget
    (refusals without a request left out), in fetch order."""
    skipped = sorted(outcome.value for outcome in UNCOUNTED_OUTCOMES)
    marks = ", ".join("?" * len(skipped))
    return conn.execute(
        "SELECT l.url, f.outcome, f.relevance FROM fetches f JOIN links l ON l.id = f.url_id "
        f"WHERE f.outcome NOT IN ({marks}) ORDER BY f.id", skipped).fetchall()


def _kind(true_topic: str | None, topic: str, outcome: str, relevance: float | None,
          threshold: float) -> tuple[str, str]:
    if true_topic == topic:
        return "on_topic", topic
    if outcome != "ok" or true_topic is None:
        return "no_page", ""
    if relevance is not None and relevance >= threshold:
        return "taken_for_topic", true_topic
    return "judged_off_topic", true_topic


def _pages_of(topic_of: Iterable[tuple[str, str]], topic: str) -> set[str]:
    return {key for key, of in topic_of if of == topic}


def losses_table(rows: Iterable[tuple[str, dict[str, Any]]]) -> str:
    """One line per crawl (label, its ``page_losses``)."""
    head = ["strategy", "pages", "on the topic", "taken for the topic (from)",
            "judged off the topic", "no page", "missed", "topic's pages known, not fetched",
            "unknown"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, loss in rows:
        taken_from = ", ".join(f"{of} {n}" for of, n in loss["taken_from"].items())
        cells = [label, loss["pages"], loss["on_topic"],
                 f"{loss['taken_for_topic']}" + (f" ({taken_from})" if taken_from else ""),
                 loss["judged_off_topic"], loss["no_page"], loss["missed"],
                 f"{loss['known_not_fetched']} of {loss['topic_pages']}",
                 f"{loss['unknown']} of {loss['topic_pages']}"]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines)
