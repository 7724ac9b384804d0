"""Domain discovery on the sandbox's discovery web: the headline figures of
``jlse eval --discovery``, and the time of one discovery round's ranking and choice.

Runs the full evaluation (``jlse.eval_discovery.run_discovery_eval``: per topic one discovery
run per chooser - UCB1, each operator alone, random - to the page budget; the UCB1 run's pages
ranked again by each ranking function, the combination and each α) and prints:

- new relevant sites (site truth, seed sites excluded) at the budget: UCB1 vs the best single
  operator (chosen with hindsight) vs random, per topic and summed; UCB1 should be within 5% of
  the best operator and above random;
- P@20 of the ranked sites: the combination vs each ranking function alone;
- the α sweep (P@20, Mean Rank, page R-precision);
- one round's ranking and choice at 5,000 pages: tokenise a round's new pages, fit, rank every
  page from the kept feature rows (as the loop does; ``bench_discovery_rank`` draws the pages
  and times the steps), then UCB1's update and choice.

The report (discovery-report.md/.json, plots, every run's workdir) goes to ``--out``.

    .venv/bin/python benchmarks/bench_discovery.py [--quick] [--repeats 3] [--parallel 1]
                                                   [--set KEY=VALUE]

Runs vary with timing (parallel fetches; hosts waiting for a robots.txt slot), so each topic
and chooser runs ``--repeats`` times (default 3; ~4 minutes a repeat on 2 cores) and the
headline compares means. ``--parallel 2`` runs two discoveries at once, which changes the
timing the runs depend on.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

import bench_discovery_rank as rank_bench  # noqa: E402

from jlse.discovery.bandit import make_chooser  # noqa: E402
from jlse.discovery.ranking import PageRanker, page_features  # noqa: E402
from jlse.eval_discovery import (  # noqa: E402
    CHOOSERS,
    DEFAULT_BUDGET,
    DEFAULT_TOPICS,
    run_discovery_eval,
)
from jlse.eval_discovery_metrics import ALPHAS  # noqa: E402
from jlse.models import tokenizer  # noqa: E402
from jlse.settings import command_overrides  # noqa: E402


def round_time(pages: int, repeat: int) -> tuple[float, float]:
    """(median seconds of one round's ranking + choice, of the choice alone) at ``pages``."""
    args = argparse.Namespace(topic="phones", samples=20, negatives=100, pages=pages,
                              links=4 * pages)
    texts, links, samples, negatives, _ = rank_bench.draw(args)
    tokenizer.prepare(texts)  # the one-off dictionary build is no round's cost
    rows, sample_rows = page_features(texts), page_features(samples)
    negative_rows = page_features(negatives)
    new = texts[:: max(1, len(texts) // 50)][:50]  # a round's new pages
    chooser = make_chooser("ucb1")
    for op in chooser.operators:
        chooser.update(op, 0.3, 40)

    def one_round() -> None:
        page_features(new)
        PageRanker().fit(sample_rows, negative_rows).rank(rows, links)
        chooser.update(chooser.choose(), 0.3, 40)

    def choose() -> None:
        chooser.update(chooser.choose(), 0.3, 40)

    return rank_bench.timed(one_round, repeat)[0], rank_bench.timed(choose, repeat)[0]


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _mean(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def print_headline(report) -> None:  # noqa: ANN001 - a DiscoveryEvalReport
    headline = report.headline()
    choosers = report.choosers
    spread = report.repeats > 1
    of_repeats = f", mean [min-max] of {report.repeats} repeats" if spread else ""
    print(f"\nnew relevant sites at the budget (seed sites excluded){of_repeats}")
    print(f"  {'topic':<8} " + " ".join(f"{c:>14}" for c in choosers)
          + "  UCB1>=95%best  UCB1>random")
    for topic, h in headline.items():
        cells = []
        for chooser in choosers:
            mean, (low, high) = h["new_sites"].get(chooser), h["new_sites_range"].get(
                chooser, (None, None))
            cell = "-" if mean is None else f"{mean:.1f}" + (f" [{low}-{high}]" if spread else "")
            cells.append(f"{cell:>14}")
        print(f"  {topic:<8} " + " ".join(cells) + f"  {h['ucb1_within_5pct_of_best']!s:>13}"
              f"  {h['ucb1_beats_random']!s:>11}   (best operator: {h['best_operator']})")
    print("\nP@20 of the ranked sites, the UCB1 run's pages ranked again"
          + (" (mean of the repeats)" if spread else ""))
    for topic in report.topics():
        h = headline[topic]
        singles = " ".join(f"{name} {_fmt(value)}" for name, value in h["single_p20"].items())
        print(f"  {topic:<8} combined {_fmt(h['combined_p20'])} | {singles} | combined beats "
              f"every single: {h['combined_beats_every_single']}")
    print("\nalpha sweep (P@20 / Mean Rank / page R-precision" + (", means)" if spread else ")"))
    for topic in report.topics():
        cells = []
        for alpha in report.alphas:
            rows = [r.metrics for r in report.rankings
                    if r.topic == topic and r.group == "alpha" and r.alpha == alpha]
            cells.append(f"alpha {alpha:g}: {_fmt(_mean([m.precision.get(20) for m in rows]))}"
                         f" / {_fmt(_mean([m.mean_rank for m in rows]), 1)}"
                         f" / {_fmt(_mean([m.page_r_precision for m in rows]), 3)}")
        print(f"  {topic:<8} " + "   ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", default=",".join(DEFAULT_TOPICS))
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--choosers", default=",".join(CHOOSERS))
    parser.add_argument("--seed", type=int, default=7, help="sandbox web seed")
    parser.add_argument("--parallel", type=int, default=1, help="discovery runs at once")
    parser.add_argument("--repeats", type=int, default=3, help="runs per topic and chooser "
                        "(they vary with timing: the headline compares means)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                        help="a setting for every discovery run, e.g. robots_slots=8")
    parser.add_argument("--out", default="runs/bench-discovery")
    parser.add_argument("--round-pages", type=int, default=5_000)
    parser.add_argument("--round-repeat", type=int, default=3, help="timings of a round")
    parser.add_argument("--quick", action="store_true", help="phones only, 150 pages, "
                        "ucb1/keyword/random, 1 repeat, 1,000-page round")
    args = parser.parse_args()
    if args.quick:
        args.topics, args.budget, args.choosers = "phones", 150, "ucb1,keyword,random"
        args.round_pages, args.round_repeat, args.repeats = 1_000, 1, 1
    terminal = logging.StreamHandler()
    terminal.setLevel(logging.WARNING)  # each run logs INFO to its own discover.log
    logging.getLogger().addHandler(terminal)

    started = time.monotonic()
    report = run_discovery_eval(args.topics.split(","), budget=args.budget,
                                out_dir=Path(args.out), seed=args.seed,
                                choosers=args.choosers.split(","), alphas=ALPHAS,
                                parallel=args.parallel, repeats=args.repeats,
                                overrides=command_overrides(args.set, {}))
    wall = time.monotonic() - started
    print(report.render())
    print(f"{len(report.runs)} discovery runs of {args.budget} pages, {args.parallel} at a time: "
          f"{wall:.0f} s wall (report in {args.out}/discovery-report.md)")
    print_headline(report)
    seconds, choice = round_time(args.round_pages, args.round_repeat)
    print(f"\none round at {args.round_pages} pages (tokenise 50 new pages, fit, rank from rows, "
          f"UCB1 update + choose): {seconds:.3f} s (the choice alone {1e6 * choice:.0f} us); "
          f"median of {args.round_repeat}")


if __name__ == "__main__":
    main()
