"""``jlse eval --discovery``: domain discovery on the sandbox's discovery web, measured by its
ground truth (docs/algorithms.md §3.6).

For every topic, one discovery run per chooser (UCB1, each operator alone, random choice) from
the same topic directory to the same page budget, each in a fresh workdir, measured in fetch
order by ``eval_discovery_metrics``: page harvest rate and new relevant sites against pages
fetched, and the run's own ranked sites (P@k, Mean and Median Rank). Then the pages of the UCB1
run are ranked again by each ranking function alone, the combination and the α of the sweep
(``eval_discovery_metrics.compare_rankings``; nothing is fetched again).

The sandbox's discovery web is served in a child process (proxy and search API on one port);
the evaluation writes discovery-report.md, discovery-report.json, and per topic two plots (page
harvest rate, new relevant sites) to OUT, and each run's workdir to OUT/TOPIC/CHOOSER.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jlse.eval import SANDBOX_SETTINGS, EvalError, GroundTruth, sandbox_process
from jlse.eval_discovery_metrics import (
    ALPHAS,
    CHOOSERS,
    ChooserRun,
    RankingResult,
    TopicTruth,
    compare_rankings,
    headline_of,
    load_rank_inputs,
    measure_run,
    seed_hosts,
)
from jlse.plots import plot_curves
from jlse.sandbox import build_web
from jlse.topic import read_seeds

log = logging.getLogger(__name__)

DEFAULT_TOPICS = ("phones", "cameras", "laptops")
DEFAULT_BUDGET = 500
CHECKPOINTS = (100, 250, 500, 1000, 2000)
# the sandbox's search engine is local: a search a second (the default) would only add waiting
DISCOVERY_SANDBOX_SETTINGS: dict[str, Any] = {**SANDBOX_SETTINGS, "search_rate": 50.0}


@dataclass
class DiscoveryEvalReport:
    budget: int
    seed: int
    checkpoints: list[int]
    choosers: list[str]
    alphas: list[float]
    settings: dict[str, Any]
    truths: dict[str, TopicTruth] = field(default_factory=dict)
    runs: list[ChooserRun] = field(default_factory=list)
    rankings: list[RankingResult] = field(default_factory=list)
    ranked_run: dict[str, str] = field(default_factory=dict)  # topic -> chooser re-ranked
    plots: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    repeats: int = 1

    def topics(self) -> list[str]:
        return list(self.truths)

    def headline(self) -> dict[str, dict[str, Any]]:
        """Per topic and summed: UCB1 vs the best single operator and random; the combined
        ranking's P@20 vs each single function's."""
        rows = {topic: headline_of([r for r in self.runs if r.topic == topic],
                                   [r for r in self.rankings if r.topic == topic])
                for topic in self.topics()}
        rows["all"] = headline_of(self.runs, [], summed=True)
        return rows

    def render(self) -> str:
        return render_report(self)

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "seed": self.seed, "checkpoints": self.checkpoints,
                "choosers": self.choosers, "alphas": self.alphas, "repeats": self.repeats,
                "settings": self.settings,
                "truth": {topic: {"relevant_sites": len(t.relevant_sites),
                                  "seed_sites": sorted(t.seeds),
                                  "relevant_non_seed_sites": len(t.targets)}
                          for topic, t in self.truths.items()},
                "headline": self.headline(), "runs": [r.to_dict() for r in self.runs],
                "rankings": [r.to_dict() for r in self.rankings], "ranked_run": self.ranked_run,
                "plots": self.plots, "elapsed": round(self.elapsed, 1)}

    def write(self, out_dir: Path) -> None:
        (out_dir / "discovery-report.md").write_text(self.render(), encoding="utf-8")
        (out_dir / "discovery-report.json").write_text(json.dumps(self.to_dict(), indent=1),
                                                       encoding="utf-8")


# --- running ---

def _discover(job: dict[str, Any]) -> dict[str, Any]:
    """One discovery run (in this process or a pool's): its summary, or the error."""
    from jlse.discovery.run import run_discovery

    try:
        summary = run_discovery(job["topic_dir"], job["search"], job["overrides"],
                                workdir=job["workdir"], fresh=True, progress=False)
    except (ValueError, RuntimeError, OSError) as exc:  # one failed run must not end the eval
        return {"error": f"{type(exc).__name__}: {exc}"}
    return summary.to_dict()


def _run_all(jobs: list[dict[str, Any]], parallel: int) -> list[dict[str, Any]]:
    if parallel <= 1 or len(jobs) <= 1:
        return [_discover(job) for job in jobs]
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked threads
    with ProcessPoolExecutor(max_workers=parallel, mp_context=context) as pool:
        return list(pool.map(_discover, jobs))


def _prepare(topics: Sequence[str], seed: int, out_dir: Path, keywords_only: bool,
             ) -> tuple[GroundTruth, dict[str, TopicTruth], dict[str, Path]]:
    web = build_web(seed=seed, discovery=True)
    unknown = [topic for topic in topics if topic not in web.topics]
    if unknown:
        raise EvalError(f"unknown sandbox topic(s) {unknown}; choose from {web.topics}")
    truth = GroundTruth()
    for page in web.iter_truth():
        truth.add(page.url, page.topic, page.is_target)
    web.write_site_truth(out_dir / "site-truth.jsonl")
    dirs, truths = {}, {}
    for topic in topics:
        dirs[topic] = web.write_topic_dir(topic, out_dir / "topics" / topic,
                                          keywords_only=keywords_only)
        truths[topic] = TopicTruth(
            {host for host in web.site_truth() if web.is_relevant_site(host, topic)},
            seed_hosts(read_seeds(dirs[topic] / "seeds.txt")))
    return truth, truths, dirs


def run_discovery_eval(
    topics: Sequence[str] = DEFAULT_TOPICS,
    budget: int = DEFAULT_BUDGET,
    out_dir: Path = Path("runs/eval-discovery"),
    seed: int = 7,
    choosers: Sequence[str] = CHOOSERS,
    alphas: Sequence[float] = ALPHAS,
    parallel: int = 1,
    repeats: int = 1,
    keywords_only: bool = False,
    overrides: dict[str, Any] | None = None,
) -> DiscoveryEvalReport:
    """Discover each topic with each chooser ``repeats`` times, compare the rankings of each
    UCB1 run (else the first chooser's), and write the report and plots to ``out_dir``.

    Runs are not deterministic (fetches in parallel, hosts waiting for robots.txt: which URLs
    a round fetches depends on timing): ``repeats`` shows how much the figures move; the
    headline compares means over the repeats. ``parallel`` runs go at once (child
    processes); ``keywords_only`` topic directories have no samples; ``overrides`` are
    settings for every run, after the sandbox's own."""
    started = time.monotonic()
    unknown = [c for c in choosers if c not in CHOOSERS]
    if not topics or not choosers or unknown:
        raise EvalError(f"give topics and choosers among {', '.join(CHOOSERS)}"
                        + (f" (unknown: {unknown})" if unknown else ""))
    if budget < 1 or repeats < 1 or any(not 0.0 <= a <= 1.0 for a in alphas):
        raise EvalError("budget and repeats must be at least 1, every alpha in [0, 1]")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    truth, truths, dirs = _prepare(topics, seed, out_dir, keywords_only)
    base = {**DISCOVERY_SANDBOX_SETTINGS, **(overrides or {}), "max_pages": budget}
    checkpoints = sorted({n for n in CHECKPOINTS if n < budget} | {budget})
    report = DiscoveryEvalReport(budget, seed, checkpoints, list(choosers), list(alphas),
                                 {k: v for k, v in base.items() if k != "proxy"}, truths,
                                 repeats=repeats)
    triples = [(topic, chooser, repeat) for repeat in range(repeats) for topic in topics
               for chooser in choosers]

    def workdir(topic: str, chooser: str, repeat: int) -> Path:
        return out_dir / topic / (chooser if repeats == 1 else f"{chooser}-{repeat + 1}")

    with sandbox_process(seed, discovery=True) as url:
        jobs = [{"topic_dir": str(dirs[topic]), "search": url,
                 "overrides": dict(base, proxy=url, discovery_chooser=chooser),
                 "workdir": str(workdir(topic, chooser, repeat))}
                for topic, chooser, repeat in triples]
        log.info("eval: %d discovery runs of %d pages, %d at a time", len(jobs), budget,
                 parallel)
        summaries = _run_all(jobs, parallel)
    ranked_chooser = "ucb1" if "ucb1" in choosers else choosers[0]
    for (topic, chooser, repeat), summary in zip(triples, summaries, strict=True):
        run = measure_run(topic, chooser, workdir(topic, chooser, repeat), summary, truth,
                          truths[topic], checkpoints)
        run.repeat = repeat
        log.info("eval: %s/%s: %d pages, %d new relevant sites (%s)", topic, chooser,
                 run.fetched, run.new_sites, run.reason)
        report.runs.append(run)
        if chooser == ranked_chooser and not run.reason.startswith("failed"):
            try:
                inputs = load_rank_inputs(workdir(topic, chooser, repeat), dirs[topic],
                                          base)
            except ValueError as exc:  # e.g. a run that ended before its first ranking
                log.error("eval: cannot rank the pages of %s/%s again: %s", topic, chooser, exc)
                continue
            for result in compare_rankings(topic, inputs, truth, truths[topic].relevant_sites,
                                           truths[topic].seeds, alphas):
                result.repeat = repeat
                report.rankings.append(result)
            report.ranked_run[topic] = chooser
    report.plots = [str(path) for path in plot_discovery(report, out_dir)]
    report.elapsed = time.monotonic() - started
    report.write(out_dir)
    return report


@dataclass
class MeanCurves:
    strategy: str  # the line's label
    harvest: list[float]
    sites: list[float]


def mean_curves(runs: Sequence[ChooserRun]) -> list[MeanCurves]:
    """Per chooser the mean curves over its repeats: harvest as far as every repeat went, new
    sites as far as the longest (a run that ended keeps its count)."""
    by_chooser: dict[str, list[ChooserRun]] = {}
    for run in runs:
        by_chooser.setdefault(run.chooser, []).append(run)
    curves = []
    for chooser, group in by_chooser.items():
        short = min(len(r.harvest) for r in group)
        long = max(len(r.sites) for r in group)
        sites = [r.sites + [r.sites[-1] if r.sites else 0.0] * (long - len(r.sites))
                 for r in group]
        curves.append(MeanCurves(chooser, np.mean([r.harvest[:short] for r in group],
                                                  axis=0).tolist(),
                                 np.mean(sites, axis=0).tolist() if long else []))
    return curves


def plot_discovery(report: DiscoveryEvalReport, out_dir: Path) -> list[Path]:
    """Per topic: page harvest rate and new relevant sites vs pages fetched, one line per
    chooser (the mean of its repeats); a failed plot is logged, not raised."""
    written = []
    for topic in report.topics():
        runs = mean_curves([r for r in report.runs if r.topic == topic])
        for metric, ylabel, ylim, name in (
                ("harvest", "page harvest rate", (0.0, 1.0), "harvest"),
                ("sites", "new relevant sites", None, "sites")):
            try:
                written.append(plot_curves(runs, metric, f"{topic}: {ylabel} (discovery)",
                                           out_dir / f"{topic}-discovery-{name}.png",
                                           ylabel=ylabel, ylim=ylim))
            except (OSError, ValueError, RuntimeError) as exc:
                log.error("eval: cannot write plot %s-discovery-%s.png: %s", topic, name, exc)
    return written


# --- the report ---

def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}".removesuffix(".0")


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = [head, ["---"] * len(head), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def _mark(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "NO")


def _headline_table(report: DiscoveryEvalReport) -> str:
    rows = []
    for topic, h in report.headline().items():
        def sites(chooser: str | None, h: dict = h) -> str:
            low, high = h["new_sites_range"].get(chooser, (None, None))
            spread = f" ({low}-{high})" if report.repeats > 1 and low is not None else ""
            return _count(h["new_sites"].get(chooser)) + spread

        best = h["best_operator"]
        p20 = h.get("single_p20") or {}
        top = max((value or 0.0 for value in p20.values()), default=None)
        best_single = ", ".join(name for name, value in p20.items() if (value or 0.0) == top)
        rows.append([topic, sites("ucb1"), f"{sites(best)} {best}" if best else "-",
                     sites("random"), _mark(h["ucb1_within_5pct_of_best"]),
                     _mark(h["ucb1_beats_random"]), _num(h.get("combined_p20"), 2),
                     f"{_num(top, 2)} ({best_single})" if p20 else "-",
                     _mark(h.get("combined_beats_every_single"))
                     + (" (tie)" if p20 and h.get("combined_p20") == top else "")])
    return _table(["topic", "UCB1 new sites", "best operator", "random",
                   "UCB1 >= 95% best", "UCB1 > random", "combined P@20", "best single P@20",
                   "combined > every single"], rows)


def _runs_table(runs: Sequence[ChooserRun], checkpoints: Sequence[int], repeats: int) -> str:
    head = (["chooser", "pages"] + [f"HR@{n}" for n in checkpoints]
            + [f"sites@{n}" for n in checkpoints]
            + ["site HR", "site recall", "own P@20", "rounds", "s", "ended"])
    rows = []
    for r in runs:
        label = r.chooser + (f" #{r.repeat + 1}" if repeats > 1 else "")
        rounds = ", ".join(f"{op} {n}" for op, n in sorted(r.rounds.items()) if op != "seeds")
        rows.append([label, str(r.fetched)] + [_num(r.harvest_at[n]) for n in checkpoints]
                    + [str(r.sites_at[n]) for n in checkpoints]
                    + [_num(r.site_harvest, 4), _num(r.site_recall),
                       _num(r.ranking.precision.get(20) if r.ranking else None, 2),
                       rounds or "-", f"{r.elapsed:.0f}",
                       r.reason.replace("page budget reached", "budget")])
    return _table(head, rows)


def _rankings_table(rankings: Sequence[RankingResult]) -> str:
    """One row per method: the mean over the repeats."""
    by_method: dict[str, list[RankingResult]] = {}
    for r in rankings:
        by_method.setdefault(r.method, []).append(r)

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    rows, ks = [], sorted(rankings[0].metrics.precision) if rankings else []
    for method, group in by_method.items():
        ms = [r.metrics for r in group]
        label = method if group[0].group != "combined" else f"combined (alpha={group[0].alpha:g})"
        rows.append([label] + [_num(mean([m.precision.get(k) for m in ms]), 2) for k in ks]
                    + [_num(mean([m.mean_rank for m in ms]), 1),
                       _num(mean([m.median_rank for m in ms]), 1),
                       f"{_count(mean([m.n_relevant for m in ms]))}/"
                       f"{_count(mean([m.n_sites for m in ms]))}",
                       _num(mean([m.page_r_precision for m in ms]))])
    return _table(["ranking"] + [f"P@{k}" for k in ks]
                  + ["Mean Rank", "Median Rank", "relevant/sites", "page R-prec"], rows)


def render_report(report: DiscoveryEvalReport) -> str:
    repeated = f", {report.repeats} repeats (means; range in brackets)" \
        if report.repeats > 1 else ""
    parts = [f"# jlse eval --discovery: budget {report.budget} pages, sandbox seed "
             f"{report.seed}{repeated}",
             "HR@N: page harvest rate (page truth) after N pages fetched; sites@N: new "
             "relevant sites (site truth, seed sites excluded) with a page among the first N; "
             "site HR: new relevant sites / pages fetched; site recall: of the web's relevant "
             "non-seed sites; own P@20: the run's sites.jsonl. Best operator: the single "
             "operator that found most (with hindsight). Rankings: the UCB1 run's pages ranked "
             "again; P@k, Mean/Median Rank over the non-seed sites (lower rank is better); "
             "single functions at alpha 0, pagerank alone.",
             f"{len(report.runs)} runs in {report.elapsed:.0f} s.",
             "## Headline", _headline_table(report)]
    for topic in report.topics():
        t = report.truths[topic]
        parts.append(f"## {topic} ({len(t.targets)} relevant non-seed sites in the web; "
                     f"seed sites: {', '.join(sorted(t.seeds))})")
        parts.append(_runs_table([r for r in report.runs if r.topic == topic],
                                 report.checkpoints, report.repeats))
        ranked = [r for r in report.rankings if r.topic == topic]
        if ranked:
            rebuilt = [r.reproduced for r in ranked if r.group == "combined"]
            pages = _count(sum(r.pages for r in ranked) / len(ranked))
            parts.append(f"### Rankings of the {report.ranked_run.get(topic)} run's {pages} "
                         f"pages (the run's own ranking rebuilt exactly: "
                         f"{_mark(all(rebuilt) if None not in rebuilt else None)})")
            parts.append(_rankings_table([r for r in ranked if r.group != "alpha"]))
            parts.append("### alpha sweep (the combination; PageRank's weight)")
            parts.append(_rankings_table([r for r in ranked if r.group == "alpha"]))
    if report.plots:
        parts.append("Plots: " + ", ".join(Path(p).name for p in report.plots))
    return "\n\n".join(parts) + "\n"
