"""Time and memory of ranking a discovery round's pages (jlse.discovery.ranking).

Pages are rendered sandbox pages (text extracted with lxml before timing; ~330 tokens each,
English and Chinese): ``--pages`` of them are ranked with ``--links`` links drawn from the
links between them, against ``--samples`` target pages of ``--topic`` (not among the ranked
pages) and ``--negatives`` random ranked pages, as the discovery loop draws them. Reported:

- cold: fit + rank from texts (every page tokenised, as when nothing is cached);
- warm: fit + rank from ``page_features`` rows kept from earlier rounds, plus tokenising one
  round's new pages (``--new``): what a loop that vectorises each page once pays per round;
- the single steps, and the peak memory of each path (tracemalloc: Python and numpy memory,
  not the C allocations inside libsvm/liblinear; and the process's peak RSS at the end);
- precision of the top 100 and R-precision of the combined ranking (ground truth: the topic).

Wall-clock times, median of ``--repeat`` runs, each with the tokenizer's caches emptied.

    .venv/bin/python benchmarks/bench_discovery_rank.py [--pages 5000] [--quick]
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
from lxml import html

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jlse.discovery.pagerank import pagerank  # noqa: E402
from jlse.discovery.ranking import PageRanker, page_features  # noqa: E402
from jlse.models import tokenizer  # noqa: E402
from jlse.sandbox.web import build_web  # noqa: E402


def sandbox_pages(topic: str) -> tuple[list[str], list[bool], list[tuple[int, int]], list[int]]:
    """(texts, on-topic flags, links between pages, indices of target pages of ``topic``)."""
    web = build_web()
    truths = [t for t in web.iter_truth() if web.page_bytes(t.url) is not None]
    index = {t.url: i for i, t in enumerate(truths)}
    texts, links = [], []
    for i, truth in enumerate(truths):
        page = web.page_bytes(truth.url).decode(web.plan.by_host[truth.site].spec.encoding,
                                                errors="replace")
        tree = html.fromstring(page)
        tree.make_links_absolute(truth.url)
        texts.append(tree.text_content())
        links += [(i, index[href]) for href in tree.xpath("//a/@href") if href in index]
    targets = [i for i, t in enumerate(truths) if t.topic == topic and t.is_target]
    return texts, [t.topic == topic for t in truths], links, targets


def draw(args: argparse.Namespace):
    """The ranked pages, their links, the samples and the negatives, from a fixed seed."""
    texts, on_topic, links, targets = sandbox_pages(args.topic)
    rng = random.Random(0)
    samples = rng.sample(targets, args.samples)
    taken = set(samples)
    rest = [i for i in range(len(texts)) if i not in taken]
    ranked = sorted(rng.sample(rest, min(args.pages, len(rest))))
    where = {page: k for k, page in enumerate(ranked)}
    inside = [(where[a], where[b]) for a, b in links if a in where and b in where and a != b]
    chosen = rng.sample(inside, min(args.links, len(inside)))
    pages = [texts[i] for i in ranked]
    negatives = [pages[k] for k in rng.sample(range(len(pages)), args.negatives)]
    truth = np.array([on_topic[i] for i in ranked])
    return pages, chosen, [texts[i] for i in samples], negatives, truth


def forget_tokens() -> None:
    """Empty the tokenizer's caches of short texts and Chinese runs: every timed run then
    tokenises as if it met the pages first (an upper bound: a real round meets some of a site's
    boilerplate again)."""
    tokenizer._tokenize_cached.cache_clear()
    tokenizer._RUN_WORDS.clear()


def timed(step: Callable[[], object], repeat: int) -> tuple[float, object]:
    """(median seconds, last result) of ``repeat`` calls, each with cold tokenizer caches."""
    seconds, result = [], None
    for _ in range(repeat):
        forget_tokens()
        started = time.perf_counter()
        result = step()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


def peak_mb(step: Callable[[], object]) -> float:
    forget_tokens()
    tracemalloc.start()
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=5_000)
    parser.add_argument("--links", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--negatives", type=int, default=100)
    parser.add_argument("--new", type=int, default=50, help="pages a round adds (warm path)")
    parser.add_argument("--topic", default="phones")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1,000 pages, 4,000 links, 1 run")
    args = parser.parse_args()
    if args.quick:
        args.pages, args.links, args.repeat = 1_000, 4_000, 1

    pages, links, samples, negatives, truth = draw(args)
    tokenizer.prepare(pages)  # the one-off dictionary build (~1 s) is no round's cost
    features = page_features(pages)
    tokens = features.sum() / len(pages)
    print(f"{len(pages)} pages ({truth.sum()} on {args.topic}; {tokens:.0f} tokens a page as "
          f"ranked), {len(links)} links, {len(samples)} samples, {len(negatives)} negatives")
    sample_rows, negative_rows = page_features(samples), page_features(negatives)

    def cold():
        return PageRanker().fit(samples, negatives).rank(pages, links)

    new_pages = pages[:: max(1, len(pages) // args.new)][: args.new]  # all kinds of site

    def warm():
        page_features(new_pages)  # this round's new pages
        return PageRanker().fit(sample_rows, negative_rows).rank(features, links)

    steps = {
        "tokenise + hash all pages": lambda: page_features(pages),
        f"tokenise + hash {args.new} new pages": lambda: page_features(new_pages),
        "fit (from rows)": lambda: PageRanker().fit(sample_rows, negative_rows),
        "rank (from rows)": lambda: ranker.rank(features, links),
        "pagerank": lambda: pagerank(len(pages), links),
    }
    ranker = PageRanker().fit(sample_rows, negative_rows)
    for name, step in steps.items():
        print(f"  {name:<32} {1000 * timed(step, args.repeat)[0]:8.1f} ms")
    for name, step in (("cold: fit + rank from texts", cold), ("warm: fit + rank from rows", warm)):
        seconds, ranking = timed(step, args.repeat)
        print(f"{name:<34} {seconds:6.3f} s   peak traced {peak_mb(step):6.1f} MB")
    order = ranking.order
    print(f"precision of the top 100: {truth[order[:100]].mean():.3f}, "
          f"R-precision: {truth[order[: truth.sum()]].mean():.3f} "
          f"(functions: {', '.join(ranking.functions_used)}, alpha {ranking.alpha})")
    print(f"peak RSS of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
