"""What ``jlse eval --discovery`` measures (docs/algorithms.md §3.6): a discovery run's curves
in fetch order, metrics of a ranked list of sites against the site truth, and one run's pages
ranked again by each ranking function alone, by the combination and at several α - the same
pages, samples and negatives, no fetching.

Curves (fetch order, the crawl database's ``fetches`` as ``jlse eval`` reads a crawl):

- page harvest rate @N = relevant pages (page truth) among the first N fetched / N;
- new relevant sites @N = relevant sites (site truth: most of their pages on the topic) that
  are not seed sites and had a page (one the page truth knows) among the first N fetched;
  site harvest rate = new relevant sites / pages fetched.

Sites are ranked by :func:`jlse.discovery.ranking.rank_sites`. The topic's seed sites are left
out of every site metric (they were given, not discovered), so positions count the other sites:

- P@k = relevant sites among the k best non-seed sites / k (a list shorter than k counts the
  missing places as not relevant);
- Mean Rank, Median Rank = mean and median position (1 = best) of the relevant non-seed sites
  among the ranked non-seed sites (lower is better; None when none was ranked). Only rankings
  of the same pages compare: a run that finds more relevant sites has more positions to fill.

Pages: R-precision = relevant pages among the R best / R, R = relevant pages ranked.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from jlse.discovery.engine import Discovery
from jlse.discovery.fetching import Page
from jlse.discovery.pagerank import pagerank
from jlse.discovery.ranking import (
    DEFAULT_FUNCTIONS,
    FUNCTIONS,
    PAGERANK,
    PageRanker,
    Ranking,
    positions_of,
    rank_sites,
)
from jlse.discovery.state import StateFiles
from jlse.eval import (
    CURVE_STEP,
    GroundTruth,
    fetched_urls,
    harvest_curve,
    truth_key,
    value_at,
)
from jlse.scheduler.urls import host_of
from jlse.settings import DISCOVERY_OPERATORS
from jlse.topic import load_topic

log = logging.getLogger(__name__)

CHOOSERS = ("ucb1", *DISCOVERY_OPERATORS, "random")
PRECISION_AT = (10, 20, 50)
ALPHAS = (0.0, 0.2, 0.5)


# --- metrics of a ranked list of sites ---

def non_seed(ranked_sites: Sequence[str], seeds: Collection[str]) -> list[str]:
    return [site for site in ranked_sites if site not in seeds]


def precision_at(ranked_sites: Sequence[str], relevant: Collection[str], k: int,
                 seeds: Collection[str] = ()) -> float:
    """Relevant sites among the ``k`` best non-seed sites, over k."""
    if k < 1:
        raise ValueError(f"precision_at: k must be at least 1, got {k}")
    return sum(site in relevant for site in non_seed(ranked_sites, seeds)[:k]) / k


def relevant_ranks(ranked_sites: Sequence[str], relevant: Collection[str],
                   seeds: Collection[str] = ()) -> list[int]:
    """Positions (1 = best) of the relevant sites among the non-seed sites."""
    return [rank for rank, site in enumerate(non_seed(ranked_sites, seeds), start=1)
            if site in relevant]


def mean_rank(ranks: Sequence[int]) -> float | None:
    return float(statistics.fmean(ranks)) if ranks else None


def median_rank(ranks: Sequence[int]) -> float | None:
    return float(statistics.median(ranks)) if ranks else None


def r_precision(relevant_in_order: Sequence[bool]) -> float | None:
    """Relevant items among the R first / R, R = relevant items in all; None when R = 0."""
    total = sum(relevant_in_order)
    return sum(relevant_in_order[:total]) / total if total else None


@dataclass
class SiteMetrics:
    precision: dict[int, float]  # k -> P@k
    mean_rank: float | None
    median_rank: float | None
    n_sites: int  # non-seed sites ranked
    n_relevant: int  # relevant ones among them
    page_r_precision: float | None = None


def site_metrics(ranked_sites: Sequence[str], relevant: Collection[str], seeds: Collection[str],
                 ks: Sequence[int] = PRECISION_AT) -> SiteMetrics:
    ranks = relevant_ranks(ranked_sites, relevant, seeds)
    return SiteMetrics({k: precision_at(ranked_sites, relevant, k, seeds) for k in ks},
                       mean_rank(ranks), median_rank(ranks),
                       len(non_seed(ranked_sites, seeds)), len(ranks))


# --- a run's curves ---

def site_curve(urls: Sequence[str], truth: GroundTruth, relevant_sites: set[str],
               seeds: set[str]) -> np.ndarray:
    """New relevant sites after each page: element N-1 counts the relevant non-seed sites with
    a page (one the page truth knows) among the first N fetched."""
    found: set[str] = set()
    counts = []
    for url in urls:
        host = host_of(truth_key(url))
        if host in relevant_sites and host not in seeds and truth_key(url) in truth.topic_of:
            found.add(host)
        counts.append(len(found))
    return np.array(counts, dtype=float)


@dataclass
class ChooserRun:
    """One discovery run of one topic with one chooser, measured by the ground truth."""

    topic: str
    chooser: str
    fetched: int
    harvest_at: dict[int, float | None]  # page harvest rate @N
    sites_at: dict[int, int]  # new relevant sites @N (the final count past the run's end)
    site_harvest: float  # new relevant sites / pages fetched
    site_recall: float  # new relevant sites / relevant non-seed sites of the web
    ranking: SiteMetrics | None  # of the run's own ranked sites
    rounds: dict[str, int] = field(default_factory=dict)  # rounds per operator
    elapsed: float = 0.0
    reason: str = ""
    repeat: int = 0  # which of the evaluation's repeats (0 = the first)
    harvest: list[float] = field(repr=False, default_factory=list)  # full curves
    sites: list[float] = field(repr=False, default_factory=list)

    @property
    def strategy(self) -> str:  # the plots' line label
        return self.chooser

    @property
    def new_sites(self) -> int:
        return int(self.sites[-1]) if self.sites else 0

    def to_dict(self) -> dict[str, Any]:
        data = {key: value for key, value in self.__dict__.items()
                if key not in ("harvest", "sites", "ranking")}
        data["ranking"] = None if self.ranking is None else self.ranking.__dict__
        data["new_sites"] = self.new_sites
        data["harvest"] = self.harvest[CURVE_STEP - 1::CURVE_STEP]
        data["sites"] = self.sites[CURVE_STEP - 1::CURVE_STEP]
        data["curve_step"] = CURVE_STEP
        return data


@dataclass
class TopicTruth:
    relevant_sites: set[str]  # relevant sites of the web (site truth)
    seeds: set[str]  # the topic's seed sites

    @property
    def targets(self) -> set[str]:  # what discovery can find
        return self.relevant_sites - self.seeds


def measure_run(topic: str, chooser: str, workdir: Path, summary: dict[str, Any],
                truth: GroundTruth, topic_truth: TopicTruth,
                checkpoints: Sequence[int]) -> ChooserRun:
    failed = "error" in summary
    db = workdir / "crawl.db"
    urls = fetched_urls(db) if db.is_file() else []
    hr = harvest_curve(urls, truth, topic)
    sites = site_curve(urls, truth, topic_truth.relevant_sites, topic_truth.seeds)
    new = int(sites[-1]) if len(sites) else 0
    ranked = workdir / "discovery" / "sites.jsonl"
    ranking = None
    if ranked.is_file() and not failed:
        with ranked.open(encoding="utf-8") as handle:
            hosts = [json.loads(line)["site"] for line in handle if line.strip()]
        ranking = site_metrics(hosts, topic_truth.relevant_sites, topic_truth.seeds)
    return ChooserRun(
        topic=topic, chooser=chooser, fetched=len(urls),
        harvest_at={n: value_at(hr, n, hold_last=False) for n in checkpoints},
        sites_at={n: int(value_at(sites, n, hold_last=True) or 0) for n in checkpoints},
        site_harvest=new / len(urls) if urls else 0.0,
        site_recall=new / len(topic_truth.targets) if topic_truth.targets else 0.0,
        ranking=ranking, rounds=dict(summary.get("operators", {})),
        elapsed=float(summary.get("elapsed", 0.0)),
        reason=f"failed: {summary['error']}" if failed else str(summary.get("reason", "")),
        harvest=hr.tolist(), sites=sites.tolist())


# --- one run's pages, ranked again ---

@dataclass
class RankInputs:
    """What the run's last round ranked: its pages (discovery order), their feature rows and
    links, the samples and negatives; ``reproduced`` says whether the default ranking of these
    inputs gives the run's own page order (ranked-pages.jsonl)."""

    pages: list[Page]
    rows: sp.csr_matrix
    samples: sp.csr_matrix
    negatives: sp.csr_matrix
    links: list[tuple[int, int]]
    alpha: float  # the run's discovery_alpha
    homes: dict[str, int] = field(default_factory=dict)  # host -> its home page's index
    reproduced: bool | None = None

    @property
    def hosts(self) -> list[str]:
        return [page.host for page in self.pages]


def load_rank_inputs(workdir: Path, topic_dir: Path,
                     overrides: dict[str, Any] | None = None) -> RankInputs:
    """Rebuild the last round's ranking inputs from a finished run's workdir (as ``--resume``
    reads it) through the engine's own helpers, and check them against the run's ranking;
    ``overrides`` are the run's settings beyond the topic directory's."""
    topic = load_topic(topic_dir, overrides, require_seeds=False)
    files = StateFiles(Path(workdir))
    state, pages = files.load()
    engine = Discovery(None, None, None, files, state, topic.samples.relevant,
                       topic.samples.irrelevant, topic.settings.keywords, topic.settings)
    engine.corpus.add(pages)
    pages = engine.corpus.pages
    # the last ranking was made before the round counter moved on (Discovery._rank)
    rows, samples, negatives = engine.rank_inputs(max(state.round - 1, 0))
    inputs = RankInputs(pages, rows, samples, negatives, engine.corpus.links(),
                        topic.settings.discovery_alpha, engine.site_homes())
    inputs.reproduced = _reproduces(inputs, files.folder / "ranked-pages.jsonl")
    return inputs


def _reproduces(inputs: RankInputs, ranked_file: Path) -> bool | None:
    if not ranked_file.is_file():
        return None
    with ranked_file.open(encoding="utf-8") as handle:
        theirs = [json.loads(line)["url"] for line in handle if line.strip()]
    ranking = rank_with(inputs, DEFAULT_FUNCTIONS, inputs.alpha)
    ours = [inputs.pages[index].url for index in ranking.order.tolist()]
    if ours != theirs:
        log.warning("eval: the rebuilt ranking differs from the run's own %s (%d of %d pages "
                    "in the same place)", ranked_file,
                    sum(a == b for a, b in zip(ours, theirs, strict=False)), len(theirs))
    return ours == theirs


def pagerank_ranking(n: int, links: Sequence[tuple[int, int]]) -> Ranking:
    """PageRank alone (ties by discovery order)."""
    scores = pagerank(n, links)
    order = np.lexsort((np.arange(n), -scores))
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    positions = positions_of(scores)
    return Ranking(order, position, positions, {PAGERANK: positions}, {PAGERANK: scores}, (),
                   1.0)


def rank_with(inputs: RankInputs, functions: Sequence[str], alpha: float) -> Ranking:
    """The pages ranked by ``functions`` (none: PageRank alone) at ``alpha``."""
    if not functions:
        return pagerank_ranking(len(inputs.pages), inputs.links)
    ranker = PageRanker(functions=functions, alpha=alpha)
    return ranker.fit(inputs.samples, inputs.negatives).rank(inputs.rows, inputs.links)


@dataclass
class RankingResult:
    topic: str
    method: str  # "combined", a function, "pagerank"
    group: str  # "combined", "single" or "alpha"
    functions: list[str]
    alpha: float
    metrics: SiteMetrics
    pages: int = 0
    reproduced: bool | None = None  # the combination only: the run's own ranking rebuilt
    repeat: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RankMethod:
    method: str
    group: str
    functions: tuple[str, ...]
    alpha: float = 0.0
    extra: dict = field(default_factory=dict)


def ranking_methods(default_alpha: float, alphas: Sequence[float] = ALPHAS) -> list[RankMethod]:
    """The combination (the run's α), each function alone (α = 0), PageRank alone, and the
    combination at each α of the sweep."""
    return ([RankMethod("combined", "combined", DEFAULT_FUNCTIONS, default_alpha)]
            + [RankMethod(name, "single", (name,)) for name in FUNCTIONS]
            + [RankMethod(PAGERANK, "single", (), 1.0)]
            + [RankMethod(f"alpha={alpha:g}", "alpha", DEFAULT_FUNCTIONS, alpha)
               for alpha in alphas])


def compare_rankings(topic: str, inputs: RankInputs, truth: GroundTruth,
                     relevant_sites: Collection[str], seeds: Collection[str],
                     alphas: Sequence[float] = ALPHAS) -> list[RankingResult]:
    """Every ranking method on the same pages, measured by the site and page truth."""
    hosts = inputs.hosts
    page_relevant = np.array([truth.is_relevant(page.url, topic) for page in inputs.pages])
    results = []
    for method in ranking_methods(inputs.alpha, alphas):
        ranking = rank_with(inputs, method.functions, method.alpha)
        sites = [site.host for site in rank_sites(hosts, ranking, homes=inputs.homes)]
        metrics = site_metrics(sites, relevant_sites, seeds)
        metrics.page_r_precision = r_precision(page_relevant[ranking.order].tolist())
        results.append(RankingResult(
            topic, method.method, method.group, list(method.functions), method.alpha, metrics,
            pages=len(inputs.pages),
            reproduced=inputs.reproduced if method.group == "combined" else None))
    return results


def seed_hosts(seeds: Sequence[str]) -> set[str]:
    return {host_of(url) for url in seeds}


# --- the headline ---

def _mean(values: Sequence[float]) -> float | None:
    return float(statistics.fmean(values)) if values else None


def headline_of(runs: Sequence[ChooserRun], rankings: Sequence[RankingResult],
                summed: bool = False) -> dict[str, Any]:
    """The figures the issue asks for (None where a chooser or ranking is missing): new
    relevant sites per chooser (summed over the topics of ``runs``), mean over the repeats
    and their range; UCB1 against the best single operator (with hindsight) and random; the
    combination's P@20 against each single function's (means over the repeats)."""
    totals: dict[str, dict[int, int]] = {}
    for run in runs:
        per_repeat = totals.setdefault(run.chooser, {})
        per_repeat[run.repeat] = per_repeat.get(run.repeat, 0) + run.new_sites
    found = {chooser: _mean(list(v.values())) for chooser, v in totals.items()}
    fixed = {op: found[op] for op in DISCOVERY_OPERATORS if op in found}
    best = max(fixed, key=fixed.__getitem__) if fixed else None
    ucb1, rand = found.get("ucb1"), found.get("random")
    row: dict[str, Any] = {
        "new_sites": found,
        "new_sites_range": {c: [min(v.values()), max(v.values())] for c, v in totals.items()},
        "ucb1_new_sites": ucb1, "best_operator": best,
        "best_operator_new_sites": fixed.get(best) if best else None,
        "random_new_sites": rand,
        "ucb1_within_5pct_of_best": None if ucb1 is None or best is None
        else ucb1 >= 0.95 * fixed[best],
        "ucb1_beats_random": None if ucb1 is None or rand is None else ucb1 > rand}
    if summed:
        return row
    p20: dict[str, list[float]] = {}
    for r in rankings:
        if r.group != "alpha":
            p20.setdefault(r.method, []).append(r.metrics.precision.get(20, 0.0))
    singles = {name: _mean(values) for name, values in p20.items() if name != "combined"}
    combined = _mean(p20.get("combined", []))
    row.update(combined_p20=combined, single_p20=singles,
               combined_beats_every_single=None if combined is None or not singles
               else all(combined > value for value in singles.values()))
    return row
