"""PNG plots of ``jlse eval`` like the paper's figures (matplotlib, Agg backend: no display).

Per topic: harvest rate vs pages crawled (Fig. 3) and target recall vs pages crawled (Fig. 4),
one line per strategy; with a cf sweep, jlse's harvest rate for each cf (Fig. 5). The harvest
plots show the oracle (the best-possible crawl, ``jlse.oracle``) as a dashed line, when there
is one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import matplotlib

matplotlib.use("Agg")  # before pyplot: render to files only

import matplotlib.pyplot as plt  # noqa: E402

log = logging.getLogger(__name__)

FIGURE_SIZE = (7.0, 4.5)  # inches
DPI = 110


# What the plots read of jlse.eval's StrategyResult and EvalReport (eval imports this module).
class Curves(Protocol):
    topic: str
    strategy: str
    harvest: list[float]
    recall: list[float]


class Report(Protocol):
    @property
    def results(self) -> Sequence[Curves]: ...

    @property
    def sweep(self) -> Sequence[Curves]: ...

    @property
    def oracle(self) -> Sequence[Curves]: ...

    def topics(self) -> list[str]: ...


def plot_curves(results: Sequence[Curves], metric: str, title: str,
                out_path: Path, ylabel: str | None = None,
                ylim: tuple[float, float] | None = (0.0, 1.0),
                dashed: Sequence[Curves] = ()) -> Path:
    """One line per result of ``metric`` (an attribute: "harvest", "recall"...) against pages
    crawled, and a dashed one per ``dashed`` result (a reference: the oracle); ``ylim`` None
    lets the axis fit the curves (counts rather than rates)."""
    figure, axes = plt.subplots(figsize=FIGURE_SIZE)
    try:
        for result in results:
            curve = getattr(result, metric)
            axes.plot(range(1, len(curve) + 1), curve, label=result.strategy, linewidth=1.4)
        for result in dashed:
            curve = getattr(result, metric)
            axes.plot(range(1, len(curve) + 1), curve, label=result.strategy, linewidth=1.4,
                      linestyle="--", color="black")
        axes.set_xlabel("pages crawled")
        axes.set_ylabel(ylabel or ("harvest rate" if metric == "harvest" else "target recall"))
        axes.set_title(title)
        if ylim is not None:  # room above a dashed line at the top (the oracle's 1.0)
            axes.set_ylim(ylim[0], ylim[1] * 1.03 if dashed else ylim[1])
        else:
            axes.set_ylim(bottom=0.0)
        axes.grid(True, alpha=0.3)
        if results or dashed:
            axes.legend(loc="best", fontsize="small")
        figure.tight_layout()
        figure.savefig(out_path, dpi=DPI)
    finally:
        plt.close(figure)
    return out_path


def plot_report(report: Report, out_dir: Path) -> list[Path]:
    """Every figure of a report, written to ``out_dir``; a failed plot is logged, not raised."""
    jobs = []
    for topic in report.topics():
        results = [r for r in report.results if r.topic == topic]
        sweep = [r for r in report.sweep if r.topic == topic]
        oracle = [r for r in report.oracle if r.topic == topic]
        if results:
            jobs.append((results, "harvest", f"{topic}: harvest rate", f"{topic}-harvest.png",
                         oracle))
            jobs.append((results, "recall", f"{topic}: target recall", f"{topic}-recall.png",
                         []))
        if sweep:
            jobs.append((sweep, "harvest", f"{topic}: jlse harvest rate by cf",
                         f"{topic}-cf-sweep.png", oracle))
    written = []
    for results, metric, title, name, dashed in jobs:
        try:
            written.append(plot_curves(results, metric, title, out_dir / name, dashed=dashed))
        except (OSError, ValueError, RuntimeError) as exc:
            log.error("eval: cannot write plot %s: %s", name, exc)
    return written
