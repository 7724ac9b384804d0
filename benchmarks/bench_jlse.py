"""The JLSE link evaluator and Q-learning on synthetic data, on one core.

- evaluation: ``JLSEEvaluator.priorities`` of one page's out-links against a Q-table of
  ``--vertices`` vertices, median and p95 CPU ms per page (target median < 5 ms), with the
  default (capped, approximate) link search and with the exact one; side by side with it (pages
  in turn), the default ``jlse`` strategy's ``score_links`` (the evaluator's evidence times the
  link-text factor), and the same with ``link_outcomes`` on (its model learnt from 2,000
  followed links); the capped search alone, compiled (numba) and in numpy steps;
- the approximation: how often the capped search picks the exact search's best vertex
  (agreement) and the mean relative score it loses, s_exact(v*) vs s(v chosen);
- pages whose links repeat (site navigation): the same, with ``--repeat-share`` of each page's
  links drawn from a fixed pool of 200 site links (the caches at work);
- ``build_qtable``: CPU time, and peak memory allocated during a second build (tracemalloc);
- ``q_learning`` on ``--graph-vertices`` vertices and twice as many edges (target < 5 s);
- ``QTable.to_bytes`` / ``from_bytes`` time and size for the evaluation's Q-table.

Vertex and link triples are synthetic but shaped like real ones: anchors of 2-6 words, URLs of a
host among 500 sites and three path words, contexts of 25-35 words; words come from a 20,000-term
vocabulary with Zipf frequencies (p(rank r) ~ 1/(r + offset)). ``--zipf-offset 0`` is plain Zipf,
whose head terms are in nearly every context; the default 100 stands for the stop words the
tokenizer removes (the head of real text). Links are drawn independently of the vertices, so
they match them only by chance: the worst case for the index (its cost is the number of postings
of the query terms) and for the approximation (the best vertex wins by a hair). Every string of
a page is new, so no cache helps: the worst case for the fixed costs too. Times are CPU time of
this process (``time.process_time``).

    .venv/bin/python benchmarks/bench_jlse.py [--quick] [--vertices N] [--zipf-offset K]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core: no BLAS threads

import argparse  # noqa: E402
import json  # noqa: E402
import string  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import replace  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jlse.models import link_search  # noqa: E402
from jlse.models.anchor import AnchorSimilarity  # noqa: E402
from jlse.models.jlse_evaluator import JLSEEvaluator  # noqa: E402
from jlse.models.kde_nb import KDENaiveBayes  # noqa: E402
from jlse.models.link_index import CANDIDATE_RATIO, LinkIndex  # noqa: E402
from jlse.models.link_tokens import anchor_tokens, link_text_tokens  # noqa: E402
from jlse.models.naive_bayes import NaiveBayesTextClassifier  # noqa: E402
from jlse.models.qlearning import q_learning  # noqa: E402
from jlse.models.qtable import QTable, build_qtable  # noqa: E402
from jlse.models.self_training import refit  # noqa: E402
from jlse.models.strategies import LearnedTunnelling  # noqa: E402
from jlse.models.tokenizer import tokenize  # noqa: E402
from jlse.settings import Settings  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "jlse.json"
VOCABULARY_SIZE = 20_000
N_SITES = 500
LEAF_SHARE = 0.05
SITE_LINKS = 200


def vocabulary(rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` distinct lower-case words that the tokenizer keeps as they are."""
    letters = np.array(list(string.ascii_lowercase))
    words: set[str] = set()
    while len(words) < size:
        word = "".join(rng.choice(letters, rng.integers(4, 10)))
        if tokenize(word) == [word]:
            words.add(word)
    return np.array(sorted(words))


def link_triples(rng: np.random.Generator, words: np.ndarray, n: int,
                 zipf_offset: int) -> tuple[list[str], list[str], list[str]]:
    """``n`` (anchor, url, context) triples with Zipf-distributed words."""
    weights = 1.0 / (np.arange(1, len(words) + 1) + zipf_offset)
    anchor_lengths = rng.integers(2, 7, n)
    context_lengths = rng.integers(25, 36, n)
    n_words = int(anchor_lengths.sum() + context_lengths.sum()) + 3 * n
    drawn = words[rng.choice(len(words), size=n_words, p=weights / weights.sum())].tolist()
    sites = rng.integers(0, N_SITES, n)
    anchors, urls, contexts = [], [], []
    at = 0
    for i in range(n):
        anchors.append(" ".join(drawn[at : at + anchor_lengths[i]]))
        at += anchor_lengths[i]
        contexts.append(" ".join(drawn[at : at + context_lengths[i]]))
        at += context_lengths[i]
        first, second, third = drawn[at : at + 3]
        at += 3
        urls.append(f"http://site{sites[i]}.example/{first}/{second}-{third}.html")
    return anchors, urls, contexts


def site_pages(rng: np.random.Generator, words: np.ndarray, args: argparse.Namespace) -> list:
    """Pages whose links are ``--repeat-share`` site links (one pool of 200) and new links."""
    pool = link_triples(rng, words, SITE_LINKS, args.zipf_offset)
    n_repeated = round(args.links * args.repeat_share)
    pages = []
    for _ in range(args.pages):
        fresh = link_triples(rng, words, args.links - n_repeated, args.zipf_offset)
        chosen = rng.choice(SITE_LINKS, n_repeated, replace=False)
        pages.append(tuple([field[i] for i in chosen] + new
                           for field, new in zip(pool, fresh, strict=True)))
    return pages


def link_graph(rng: np.random.Generator, n_vertices: int,
               n_edges: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random recursive tree (parent of i drawn from 0..i-1) plus random extra edges."""
    children = np.arange(1, n_vertices)
    parents = (rng.random(n_vertices - 1) * children).astype(np.int64)
    extra = n_edges - len(children)
    src = np.concatenate([parents, rng.integers(0, n_vertices, extra)])
    dst = np.concatenate([children, rng.integers(0, n_vertices, extra)])
    is_leaf = rng.random(n_vertices) < LEAF_SHARE
    return src, dst, is_leaf


def anchor_model(rng: np.random.Generator, words: np.ndarray) -> AnchorSimilarity:
    """GTSAT's NB over 400 labelled anchors: a tenth of the vocabulary is 'on topic'."""
    topical, other = words[: len(words) // 10], words[len(words) // 10 :]
    anchors = [" ".join(rng.choice(topical if label else other, 4)) for label in (1, 0) * 200]
    return AnchorSimilarity().fit(anchors, [1, 0] * 200)


def sample_pages(rng: np.random.Generator, words: np.ndarray) -> list[str]:
    """A topic's 20 + 20 sample pages, relevant first in turn: 300 words each, a tenth of the
    vocabulary 'on topic'."""
    topical, other = words[: len(words) // 10], words[len(words) // 10 :]
    return [" ".join(rng.choice(topical if label else other, 300)) for label in (1, 0) * 20]


def link_text_relevance(rng: np.random.Generator, words: np.ndarray) -> Callable:
    """The link-text model of the default ``jlse`` as ``TopicModel.link_text_relevance`` uses
    it: KDE-NB over a topic's 20 + 20 sample pages (here 300 words each; a tenth of the
    vocabulary is 'on topic'), reading the link tokens the link index has cached."""
    model = KDENaiveBayes().fit(sample_pages(rng, words), [1, 0] * 20)
    return lambda anchors, contexts: model.predict_proba_tokens(link_text_tokens(anchors, contexts))


def crawl_link_text_relevance(rng: np.random.Generator, words: np.ndarray) -> Callable:
    """The default link-text model (``link_text_model = "crawl"``): the page NB of the same
    sample pages, refitted as self-training does on 400 pages of a crawl (300 words each, half
    on topic), read on the anchors."""
    topical, other = words[: len(words) // 10], words[len(words) // 10 :]
    model = NaiveBayesTextClassifier().fit(sample_pages(rng, words), [1, 0] * 20)
    crawl = (Counter(), Counter())
    for label in (1, 0) * 200:
        crawl[label].update(rng.choice(topical if label else other, 300).tolist())
    refitted = refit(model, crawl)
    return lambda anchors, contexts: refitted.predict_proba_tokens(anchor_tokens(anchors))


def page_times(evaluator: JLSEEvaluator | LearnedTunnelling, pages: list) -> dict:
    """Median and p95 CPU ms per page of the evaluator's ``priorities`` or the strategy's
    ``score_links`` (after one warm-up page)."""
    return side_by_side({"only": (evaluator, pages)})["only"]


def side_by_side(runs: dict[str, tuple]) -> dict[str, dict]:
    """:func:`page_times` of several (scorer, pages) runs, their pages taken in turn (one page of
    each, then the next of each), so that a busy spell of the machine weighs on all alike."""
    scores = {name: _scorer(scorer) for name, (scorer, _) in runs.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for name, (_, pages) in runs.items():
        scores[name](*pages[0])  # warm-up
    for turn in zip(*(pages[1:] for _, pages in runs.values()), strict=True):
        for name, page in zip(runs, turn, strict=True):
            started = time.process_time()
            scores[name](*page)
            times[name].append(time.process_time() - started)
    result = {}
    for name, seconds in times.items():
        ms = np.array(seconds) * 1000
        result[name] = {"median_ms": round(float(np.median(ms)), 2),
                        "p95_ms": round(float(np.percentile(ms, 95)), 2)}
    return result


def _scorer(evaluator: JLSEEvaluator | LearnedTunnelling) -> Callable:
    if isinstance(evaluator, LearnedTunnelling):
        # a page of a site the links (of 500 sites) mostly leave: the site bandit scores them
        return partial(evaluator.score_links, 0.9, 0, page_url="http://home.example/page")
    return partial(evaluator.priorities, 0.9)


def search_times(index: LinkIndex, pages: list) -> dict:
    """Median CPU ms per page of the capped search alone (the query matrix made), compiled
    (numba) and in numpy steps, in turn on the same pages."""
    doc_weights = [field.doc_weights_ for field in index.fields_]
    kernel = link_search._kernel()
    ways = {"numpy": partial(link_search.search_arrays),
            "compiled": partial(link_search.search_compiled, kernel)} if kernel else \
        {"numpy": partial(link_search.search_arrays)}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for page in pages:
        queries = index._queries(*page)
        for name, search in ways.items():
            started = time.process_time()
            search(queries, index.postings_, doc_weights, index.offsets_, index.rescore,
                   CANDIDATE_RATIO)
            times[name].append(time.process_time() - started)
    return {name: round(float(np.median(seconds)) * 1000, 2) for name, seconds in times.items()}


def approximation(capped: LinkIndex, pages: list) -> dict:
    """Agreement of the capped search's v* with the exact v*, and the score it loses."""
    agree, losses = [], []
    for page in pages:
        exact_best, exact_score = capped.best_vertices(*page, exact=True)
        best, score = capped.best_vertices(*page)
        matched = exact_best >= 0
        agree.append(best[matched] == exact_best[matched])
        losses.append((exact_score[matched] - score[matched]) / exact_score[matched])
    agree, losses = np.concatenate(agree), np.concatenate(losses)
    return {"agreement": round(float(agree.mean()), 4), "links": int(agree.size),
            "mean_score_loss": round(float(losses.mean()), 5),
            "p99_score_loss": round(float(np.percentile(losses, 99)), 4)}


def build_memory_mb(triples: tuple, graph: tuple) -> float:
    """Peak memory allocated while building the Q-table (Python and numpy, by tracemalloc)."""
    tracemalloc.start()
    build_qtable(1, *triples, *graph)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return round(peak / 1e6, 1)


def bench_evaluation(args: argparse.Namespace, rng: np.random.Generator) -> tuple[dict, QTable]:
    words = vocabulary(rng, VOCABULARY_SIZE)
    triples = link_triples(rng, words, args.vertices, args.zipf_offset)
    graph = link_graph(rng, args.vertices, 2 * args.vertices)
    started = time.process_time()
    table = build_qtable(1, *triples, *graph)
    build_seconds = time.process_time() - started
    exact_index = LinkIndex.from_fields(table.index.fields_, table.index.weights, max_postings=None)
    exact_table = replace(table, index=exact_index)
    anchors = anchor_model(rng, words).similarities
    pages, strategy_pages, exact_pages = ([link_triples(rng, words, args.links, args.zipf_offset)
                                           for _ in range(args.pages)] for _ in range(3))
    defaults = Settings()
    text_models = {"samples": link_text_relevance(rng, words),
                   "crawl": crawl_link_text_relevance(rng, words)}

    def default_strategy(link_outcomes: bool, text_model: str = defaults.link_text_model
                         ) -> LearnedTunnelling:
        strategy = LearnedTunnelling(JLSEEvaluator(anchors, lambda: table),
                                     section_links=defaults.section_links,
                                     link_text_relevance=text_models[text_model],
                                     link_text_weight=defaults.link_text_weight,
                                     relevance_exponent=defaults.relevance_exponent,
                                     site_optimism=defaults.site_optimism,
                                     redirect_waste=defaults.redirect_waste,
                                     link_outcomes=link_outcomes)
        if link_outcomes:  # the anchors a crawl of 2,000 pages followed, half to relevant pages
            followed = link_triples(rng, words, 2000, args.zipf_offset)
            for i, anchor in enumerate(followed[0]):
                strategy.observe_followed_link(anchor, float(i % 2))
        return strategy

    with_outcomes_pages, samples_pages = ([link_triples(rng, words, args.links, args.zipf_offset)
                                          for _ in range(args.pages)] for _ in range(2))
    # The evaluator and the default strategy side by side; no cache shared (pages all new).
    default = side_by_side({"capped": (JLSEEvaluator(anchors, lambda: table), pages),
                            "strategy": (default_strategy(defaults.link_outcomes),
                                         strategy_pages),
                            "strategy_with_outcomes": (default_strategy(True),
                                                       with_outcomes_pages),
                            "strategy_samples_link_text": (default_strategy(False, "samples"),
                                                           samples_pages)})
    result = {
        "vertices": args.vertices, "links_per_page": args.links, "pages": args.pages,
        "zipf_offset": args.zipf_offset, "max_postings": list(table.index.caps),
        "rescore": table.index.rescore, "build_qtable_s": round(build_seconds, 2),
        "capped": default["capped"],
        "exact": page_times(JLSEEvaluator(anchors, lambda: exact_table), exact_pages),
        "approximation": approximation(table.index, pages[: args.agreement_pages]),
        "search_only_ms": search_times(table.index, pages[1:]),
        "repeat_share": args.repeat_share,
        "repeated": page_times(JLSEEvaluator(anchors, lambda: table), site_pages(rng, words, args)),
        "strategy": default["strategy"],
        "strategy_with_outcomes": default["strategy_with_outcomes"],
        "strategy_samples_link_text": default["strategy_samples_link_text"],
    }
    if args.memory:
        result["build_peak_mb"] = build_memory_mb(triples, graph)
    return result, table


def bench_serialisation(table: QTable) -> dict:
    started = time.process_time()
    data = table.to_bytes()
    to_seconds = time.process_time() - started
    started = time.process_time()
    QTable.from_bytes(data)
    from_seconds = time.process_time() - started
    return {"to_bytes_ms": round(to_seconds * 1000, 1), "from_bytes_ms": round(from_seconds * 1000, 1),
            "size_mb": round(len(data) / 1e6, 1)}


def bench_q_learning(args: argparse.Namespace, rng: np.random.Generator) -> dict:
    src, dst, is_leaf = link_graph(rng, args.graph_vertices, 2 * args.graph_vertices)
    started = time.process_time()
    q, sweeps = q_learning(args.graph_vertices, src, dst, is_leaf)
    seconds = time.process_time() - started
    return {"vertices": args.graph_vertices, "edges": len(src), "seconds": round(seconds, 2),
            "sweeps": sweeps, "reaching_a_leaf": round(float(np.mean(q > 0)), 3)}


def report(evaluation: dict) -> None:
    e = evaluation
    approx = e["approximation"]
    print(f"evaluation: {e['links_per_page']} links/page against {e['vertices']:,} vertices "
          f"(zipf offset {e['zipf_offset']}), {e['pages']} pages, target median < 5 ms")
    print(f"  capped search (max_postings {e['max_postings']}, rescore {e['rescore']}): "
          f"median {e['capped']['median_ms']} ms, p95 {e['capped']['p95_ms']} ms")
    print(f"  exact search: median {e['exact']['median_ms']} ms, p95 {e['exact']['p95_ms']} ms")
    search = e["search_only_ms"]
    print("  the capped search alone (query matrix made): median "
          + ", ".join(f"{ms} ms {name}" for name, ms in search.items()))
    print(f"  capped v* = exact v* for {approx['agreement']:.1%} of {approx['links']:,} links; "
          f"score lost: mean {approx['mean_score_loss']:.3%}, p99 {approx['p99_score_loss']:.2%}")
    print(f"  pages with {e['repeat_share']:.0%} repeated site links (capped): median "
          f"{e['repeated']['median_ms']} ms, p95 {e['repeated']['p95_ms']} ms")
    samples = e["strategy_samples_link_text"]
    print(f"  the default jlse strategy's score_links (the evaluator's evidence x the link-text "
          f"factor, the crawl-refitted page NB over the anchors): median "
          f"{e['strategy']['median_ms']} ms, p95 {e['strategy']['p95_ms']} ms; side by side, "
          f"with link_text_model = samples (KDE-NB over anchor + context): median "
          f"{samples['median_ms']} ms, p95 {samples['p95_ms']} ms; with link_outcomes on: median "
          f"{e['strategy_with_outcomes']['median_ms']} ms, "
          f"p95 {e['strategy_with_outcomes']['p95_ms']} ms")
    memory = f", peak memory {e['build_peak_mb']} MB" if "build_peak_mb" in e else ""
    print(f"build_qtable of {e['vertices']:,} vertices: {e['build_qtable_s']} s{memory}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 vertices, 50 pages, 100,000-"
                        "vertex graph")
    parser.add_argument("--vertices", type=int, default=100_000)
    parser.add_argument("--links", type=int, default=100, help="out-links per page")
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--agreement-pages", type=int, default=50,
                        help="pages whose links are searched both ways for the agreement")
    parser.add_argument("--repeat-share", type=float, default=0.5,
                        help="share of repeated site links on the pages of the second run")
    parser.add_argument("--zipf-offset", type=int, default=100)
    parser.add_argument("--graph-vertices", type=int, default=1_000_000)
    parser.add_argument("--no-memory", dest="memory", action="store_false",
                        help="skip the second, traced build_qtable")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.quick:
        args.vertices, args.pages, args.graph_vertices = 10_000, 50, 100_000
    rng = np.random.default_rng(args.seed)

    evaluation, table = bench_evaluation(args, rng)
    report(evaluation)
    serialisation = bench_serialisation(table)
    print(f"Q-table of {evaluation['vertices']:,} vertices: to_bytes {serialisation['to_bytes_ms']} ms, "
          f"from_bytes {serialisation['from_bytes_ms']} ms, {serialisation['size_mb']} MB")
    learning = bench_q_learning(args, rng)
    print(f"q_learning: {learning['vertices']:,} vertices, {learning['edges']:,} edges: "
          f"{learning['seconds']} s, {learning['sweeps']} sweeps (target < 5 s)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"quick": args.quick, "evaluation": evaluation, "serialisation": serialisation,
                                   "q_learning": learning}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
