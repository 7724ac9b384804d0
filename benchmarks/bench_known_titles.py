"""What known titles (models/known_titles.py) cost where the crawl's results are written.

    .venv/bin/python benchmarks/bench_known_titles.py [--pages 300] [--links 100] [--quick]

The default ``jlse`` strategy's ``observe_result`` (site bandit, URL-shape lifts) on pages of
``--links`` links each, with ``known_titles`` off and on, side by side in turns: ms per page.
Anchors are drawn from a pool of titles, some of which the crawl has judged, so links are
named, remembered and raised as in a crawl. Then the bytes each remembered title and link
takes (tracemalloc) at the bounds' scale.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jlse.models.known_titles import KnownTitles  # noqa: E402
from jlse.models.strategies import LearnedTunnelling  # noqa: E402
from jlse.records import NewLink  # noqa: E402


class FixedEvidence:
    def evidence(self, anchors, urls, contexts):
        return np.full(len(urls), 0.2), np.zeros(len(urls))


def crawl_pages(rng: random.Random, pages: int, links: int) -> tuple[list[str], list[list[NewLink]]]:
    words = [f"w{i}" for i in range(5000)]
    titles = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(20 * pages)]
    batches = [[NewLink(f"http://h{rng.randrange(50)}.test/s/{rng.randrange(10**7)}", 1, 2,
                        anchor_text=rng.choice(titles)[:40], context="x" * 100, priority=0.3,
                        site_group=rng.choice((0, 1))) for _ in range(links)]
               for _ in range(pages)]
    return titles, batches


def ms_per_page(known_titles: bool, titles: list[str], batches: list[list[NewLink]]) -> float:
    strategy = LearnedTunnelling(FixedEvidence(), site_optimism=0.3, relevance_exponent=4,
                                 redirect_waste=True, shape_harvest=True,
                                 known_titles=known_titles)
    strategy.lift_at_pop()
    started = time.perf_counter()
    for n, links in enumerate(batches):
        strategy.observe_result(f"http://h{n % 50}.test/s/p{n}", 0.9 if n % 3 else 0.1,
                                [NewLink(link.url, link.parent_id, link.depth,
                                         anchor_text=link.anchor_text, priority=link.priority,
                                         site_group=link.site_group) for link in links],
                                detail=True, title=titles[n])
    return (time.perf_counter() - started) * 1000 / len(batches)


def bytes_each(count: int) -> tuple[float, float]:
    titles = [f"story {i} about the copper price today in chile" for i in range(count)]
    links = [NewLink(f"http://site{i % 97}.test/story/{i}.html", i, 3,
                     anchor_text=f"link {i} names a story nobody fetched yet") for i in range(count)]
    tracemalloc.start()
    known = KnownTitles(max_titles=count, max_pending=count)
    for title in titles:
        known.observe(title, 1.0)
    after_titles = tracemalloc.get_traced_memory()[0]
    known.name(links)
    after_links = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after_titles / count, (after_links - after_titles) / count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--links", type=int, default=100, help="links per page")
    parser.add_argument("--rounds", type=int, default=3, help="off/on turns")
    parser.add_argument("--quick", action="store_true", help="100 pages, one turn")
    args = parser.parse_args(argv)
    if args.quick:
        args.pages, args.rounds = 100, 1
    titles, batches = crawl_pages(random.Random(1), args.pages, args.links)
    off, on = [], []
    for _ in range(args.rounds):
        off.append(ms_per_page(False, titles, batches))
        on.append(ms_per_page(True, titles, batches))
    print(f"observe_result, {args.links} links a page: known_titles off "
          f"{np.median(off):.3f} ms, on {np.median(on):.3f} ms per page (median of {args.rounds})")
    title_bytes, link_bytes = bytes_each(50_000)
    print(f"memory: {title_bytes:.0f} bytes per title, {link_bytes:.0f} per link remembered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
