"""The report of ``jlse eval``: one row per crawl (and the oracle's), the markdown tables,
report.md and report.json.

Efficiency@N = HR@N / oracle HR@N, per topic (None when either is None or the oracle's is 0),
and its mean over the topics per strategy (None unless every topic has a value). With repeated
runs (rows ``S #1``, ``S #2``...), the spread section gives each strategy's mean and range over
its runs at the largest N: efficiency (harvest rate without an oracle) and relevant sites.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jlse.eval_losses import losses_table

CURVE_STEP = 10  # report.json keeps every 10th point of the curves
ORACLE = "oracle"  # the oracle row's label
ORACLE_NA = "oracle: n/a (needs the web's link graph)"
RUN_MARK = " #"  # a repeated crawl's label: strategy, RUN_MARK, run number


@dataclass
class StrategyResult:
    """One crawl of one topic with one strategy, measured by the ground truth."""

    topic: str
    strategy: str  # a label: the strategy name, or e.g. "jlse cf=50" in a cf sweep
    fetched: int
    n_targets: int  # targets of the topic in the web
    harvest_at: dict[int, float | None]
    recall_at: dict[int, float]
    harvest: list[float] = field(repr=False, default_factory=list)  # full curves
    recall: list[float] = field(repr=False, default_factory=list)
    elapsed: float = 0.0
    reason: str = ""
    efficiency_at: dict[int, float | None] = field(default_factory=dict)  # HR / oracle HR
    # relevant sites (registered domains with a relevant page) among the first N pages
    sites_at: dict[int, int] = field(default_factory=dict)
    # where the first N pages went (``jlse.eval_losses.page_losses``); {} for the oracle
    losses: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["harvest"] = self.harvest[CURVE_STEP - 1::CURVE_STEP]
        data["recall"] = self.recall[CURVE_STEP - 1::CURVE_STEP]
        data["curve_step"] = CURVE_STEP
        return data


def efficiency(value: float | None, bound: float | None) -> float | None:
    """HR / oracle HR; None when either is missing or the oracle harvested nothing."""
    if value is None or not bound:
        return None
    return value / bound


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def describe_web(web: dict[str, Any]) -> str:
    """E.g. "real web (seed 7, fraction 0.5)": what ``jlse eval --web --seed --fraction``
    rebuilds."""
    fraction = web.get("fraction", 1.0)
    return (f"{web['name']} web (seed {web['seed']}"
            + (f", fraction {fraction:g})" if fraction != 1.0 else ")"))


def markdown_table(results: Sequence[StrategyResult], checkpoints: Sequence[int]) -> str:
    head = (["strategy", "pages"] + [f"HR@{n}" for n in checkpoints]
            + [f"TR@{n}" for n in checkpoints] + [f"sites@{n}" for n in checkpoints])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        label = f"{r.strategy} (failed)" if r.reason.startswith("failed") else r.strategy
        cells = ([label, str(r.fetched)] + [_cell(r.harvest_at[n]) for n in checkpoints]
                 + [_cell(r.recall_at[n]) for n in checkpoints]
                 + [str(r.sites_at.get(n, "-")) for n in checkpoints])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def efficiency_table(rows: dict[str, dict[int, float | None]],
                     checkpoints: Sequence[int]) -> str:
    """One line per label: its efficiency at each checkpoint."""
    head = ["strategy"] + [f"eff@{n}" for n in checkpoints]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, values in rows.items():
        lines.append("| " + " | ".join([label] + [_cell(values.get(n)) for n in checkpoints])
                     + " |")
    return "\n".join(lines)


def base_label(label: str) -> str:
    """A row's strategy label without its run number."""
    head, mark, run = label.rpartition(RUN_MARK)
    return head if mark and run.isdigit() else label


def _mean_range(values: Sequence[float | None], mean_format: str, range_format: str) -> str:
    known = [v for v in values if v is not None]
    if not known or len(known) < len(values):
        return "-"
    mean = sum(known) / len(known)
    return (f"{mean:{mean_format}} ({min(known):{range_format}}-"
            f"{max(known):{range_format}})")


def spread_table(rows: Sequence[dict[str, Any]], measure: str) -> str:
    lines = [f"| strategy | topic | {measure} | relevant sites |", "|---|---|---|---|"]
    for row in rows:
        sites = _mean_range(row["sites"], ".1f", ".0f") if row["sites"] else ""
        lines.append(f"| {row['strategy']} | {row['topic']} | "
                     f"{_mean_range(row['values'], '.3f', '.3f')} | {sites} |")
    return "\n".join(lines)


@dataclass
class EvalReport:
    budget: int
    checkpoints: list[int]
    results: list[StrategyResult] = field(default_factory=list)
    sweep: list[StrategyResult] = field(default_factory=list)  # jlse at several cf
    oracle: list[StrategyResult] = field(default_factory=list)  # one per topic
    oracle_note: str = ORACLE_NA  # why there is no oracle row, when there is none
    plots: list[str] = field(default_factory=list)
    web: dict[str, Any] = field(default_factory=dict)  # which web: name, seed, fraction
    repeats: int = 1  # runs of each topic and strategy

    def topics(self) -> list[str]:
        return list(dict.fromkeys(r.topic for r in self.results + self.sweep + self.oracle))

    def add_efficiency(self) -> None:
        """Every crawl's (and the oracle's own) efficiency against its topic's oracle row."""
        bounds = {r.topic: r.harvest_at for r in self.oracle}
        for r in self.results + self.sweep + self.oracle:
            bound = bounds.get(r.topic)
            r.efficiency_at = {} if bound is None else {
                n: efficiency(r.harvest_at.get(n), bound.get(n)) for n in self.checkpoints}

    def mean_efficiency(self) -> dict[str, dict[int, float | None]]:
        """Per label (crawls and cf sweep), the mean efficiency over the topics at each N."""
        topics = {r.topic for r in self.oracle}
        by_label: dict[str, list[StrategyResult]] = {}
        for r in self.results + self.sweep:
            if r.topic in topics:
                by_label.setdefault(r.strategy, []).append(r)
        means: dict[str, dict[int, float | None]] = {}
        for label, rows in by_label.items():
            means[label] = {}
            for n in self.checkpoints:
                values = [r.efficiency_at.get(n) for r in rows]
                complete = len(rows) == len(topics) and None not in values
                means[label][n] = sum(values) / len(values) if complete else None
        return means

    def _efficiencies(self, topic: str) -> dict[str, dict[int, float | None]]:
        return {r.strategy: r.efficiency_at for r in self.results + self.sweep
                if r.topic == topic}

    def render(self) -> str:
        parts = [f"# jlse eval: budget {self.budget} pages"
                 + (f" on the {describe_web(self.web)}" if self.web else ""),
                 "HR@N: harvest rate, TR@N: target recall, sites@N: relevant sites (registered "
                 "domains with a relevant page) among the first N pages (ground truth); '-': the "
                 "crawl stopped before N pages (TR and sites then hold their final values).",
                 "Where the pages went: pages on the topic; off it but judged relevant (the "
                 "classifier's errors, from which true topics); off it and judged irrelevant "
                 "(hubs, lost bets of the link ranking); requests with no page (redirects, "
                 "errors); pages on the topic judged irrelevant (missed); and the topic's pages "
                 "in the web linked from a fetched page but not fetched, or never linked "
                 "(unknown)."]
        parts.append(
            "oracle: a crawl from the same seeds with the same budget that knows every page's "
            "label and the whole link graph (relevant pages it sees first, then the links "
            "nearest a relevant page); efficiency eff@N = HR@N / oracle HR@N."
            if self.oracle else self.oracle_note)
        oracle_of = {r.topic: r for r in self.oracle}
        for topic in self.topics():
            for title, rows in (("", self.results), (" - cf sweep (jlse)", self.sweep)):
                of_topic = [r for r in rows if r.topic == topic]
                if of_topic:
                    n_targets = of_topic[0].n_targets
                    if not title and topic in oracle_of:
                        of_topic.append(oracle_of[topic])
                    parts.append(f"## {topic}{title} ({n_targets} targets in the web)")
                    parts.append(markdown_table(of_topic, self.checkpoints))
            if topic in oracle_of and self._efficiencies(topic):
                parts.append(f"### {topic}: efficiency = HR@N / oracle HR@N")
                parts.append(efficiency_table(self._efficiencies(topic), self.checkpoints))
            losses = [(r.strategy, r.losses) for r in self.results if r.topic == topic and r.losses]
            if losses:
                parts.append(f"### {topic}: where the first {max(self.checkpoints)} pages went")
                parts.append(losses_table(losses))
        means = self.mean_efficiency()
        if means:
            parts.append(f"## efficiency, mean over {len(self.oracle)} topics "
                         "('-': some topic has none)")
            parts.append(efficiency_table(means, self.checkpoints))
        if self.repeats > 1:
            n = max(self.checkpoints)
            measure = "efficiency" if self.oracle else "harvest rate"
            parts.append(f"## spread over {self.repeats} runs at {n} pages: {measure} and "
                         "relevant sites, mean (lowest-highest)")
            parts.append(spread_table(self.spread(), measure))
        return "\n\n".join(parts) + "\n"

    def spread(self) -> list[dict[str, Any]]:
        """Per strategy and topic (and over all topics, where every run has a mean), the runs'
        values at the largest N: efficiency, or harvest rate without an oracle, and sites."""
        n = max(self.checkpoints)
        runs: dict[tuple[str, str], list[StrategyResult]] = {}
        for r in self.results:
            runs.setdefault((base_label(r.strategy), r.topic), []).append(r)
        rows = []
        for (strategy, topic), results in runs.items():
            values = [(r.efficiency_at or r.harvest_at).get(n) for r in results]
            rows.append({"strategy": strategy, "topic": topic, "values": values,
                         "sites": [r.sites_at.get(n) for r in results]})
        overall: dict[str, list[float | None]] = {}
        for label, at in self.mean_efficiency().items():
            overall.setdefault(base_label(label), []).append(at.get(n))
        rows += [{"strategy": strategy, "topic": "mean over the topics", "values": values,
                  "sites": []} for strategy, values in overall.items()]
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "checkpoints": self.checkpoints, "web": self.web,
                "results": [r.to_dict() for r in self.results],
                "sweep": [r.to_dict() for r in self.sweep],
                "oracle": [r.to_dict() for r in self.oracle],
                "oracle_note": "" if self.oracle else self.oracle_note,
                "mean_efficiency": self.mean_efficiency(), "plots": self.plots,
                "repeats": self.repeats,
                "spread": self.spread() if self.repeats > 1 else []}

    def write(self, out_dir: Path) -> None:
        (out_dir / "report.md").write_text(self.render(), encoding="utf-8")
        (out_dir / "report.json").write_text(json.dumps(self.to_dict(), indent=1),
                                             encoding="utf-8")
