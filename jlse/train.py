"""``jlse train``: fit a topic's model, cross-validate every classifier, save the model files.

The model is the one a crawl of the topic uses (its ``page_classifier`` setting). Every
classifier the samples allow is cross-validated with stratified k-fold (shuffled, seed 0):
the page classifiers (NB, KDE-NB, the GaussianNB baseline of docs/algorithms.md §2.6, the keyword VSM
when the topic has keywords), the result-page SVM and the anchor NB. The files go to
``topic_dir/model/`` unless told otherwise; a crawl of the topic then loads them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jlse.models.anchor import AnchorSimilarity
from jlse.models.kde_nb import GaussianNBText, KDENaiveBayes
from jlse.models.naive_bayes import NaiveBayesTextClassifier
from jlse.models.persist import read_model_header, save_topic_model
from jlse.models.result_page import ResultPageClassifier
from jlse.models.topic_model import TopicSamples, cv_fold_scores
from jlse.models.vsm import PositionVSM
from jlse.topic import (
    MODEL_DIR,
    PAGE_CV_KEYS,
    TopicError,
    load_topic,
    new_topic_model,
    relevance_reason,
    warn_if_at_chance,
)

log = logging.getLogger(__name__)


@dataclass
class CVRow:
    """Cross-validation of one classifier: accuracy per fold (empty: not enough samples)."""

    key: str  # short id: nb, kde-nb, gaussian-nb, vsm, svm, anchor-nb
    classifier: str  # readable name
    data: str  # what it classifies
    n_samples: int
    fold_scores: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return float(np.mean(self.fold_scores)) if self.fold_scores else math.nan

    @property
    def std(self) -> float:
        return float(np.std(self.fold_scores)) if self.fold_scores else math.nan

    def to_dict(self) -> dict[str, Any]:
        scored = bool(self.fold_scores)
        return {"classifier": self.classifier, "data": self.data, "n_samples": self.n_samples,
                "folds": len(self.fold_scores), "fold_scores": list(self.fold_scores),
                "accuracy": self.mean if scored else None, "std": self.std if scored else None}


@dataclass
class TrainReport:
    topic: str
    page_classifier: str
    model_dir: Path
    model_version: int
    sources: dict[str, str]
    rows: list[CVRow]
    reason: str = ""  # why the page classifier is the one it is (topic.relevance_reason)

    def accuracy(self, key: str) -> float:
        """Mean CV accuracy of the classifier ``key`` (nan when it was not cross-validated)."""
        return next((row.mean for row in self.rows if row.key == key), math.nan)

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "page_classifier": self.page_classifier,
                "model_dir": str(self.model_dir), "model_version": self.model_version,
                "sources": dict(self.sources), "reason": self.reason, "cv": {row.key: row.to_dict() for row in self.rows}}

    def render(self) -> str:
        """A table: classifier, CV accuracy ± std, n samples; ``*`` marks the page classifier."""
        lines = [f"topic {self.topic}: model version {self.model_version} saved in {self.model_dir}",
                 f"relevance model {self.sources.get('relevance')} (setting page_classifier = "
                 f"{self.page_classifier})",
                 f"  why: {self.reason}" if self.reason else "",
                 "",
                 f"  {'classifier':<28} {'data':<14} {'CV accuracy':>15} {'n':>6}"]
        chosen = PAGE_CV_KEYS.get(self.sources.get("relevance", ""), "")
        for row in self.rows:
            accuracy = f"{row.mean:.3f} ± {row.std:.3f}" if row.fold_scores else "n/a"
            mark = "*" if row.key == chosen else " "
            lines.append(f"{mark} {row.classifier:<28} {row.data:<14} {accuracy:>15} {row.n_samples:>6}")
        if any(not row.fold_scores for row in self.rows):
            lines.append("n/a: fewer than 2 samples of a class")
        if not any(row.fold_scores for row in self.rows if row.data == "pages"):
            lines.append("no page classifier could be cross-validated: the topic has no "
                         "labelled sample pages")
        return "\n".join(lines)



def train_topic(topic_dir: Path, out_dir: Path | None = None, folds: int = 5) -> TrainReport:
    """Fit, cross-validate and save the model of the topic in ``topic_dir``.

    TopicError when the topic cannot be read or trained; ValueError when ``folds`` < 2.
    """
    if folds < 2:
        raise ValueError(f"train: folds must be at least 2, got {folds}")
    topic = load_topic(topic_dir)
    out_dir = Path(out_dir) if out_dir is not None else Path(topic_dir) / MODEL_DIR
    settings = topic.settings
    model = new_topic_model(settings)
    try:
        model.fit(topic.samples)
    except ValueError as exc:
        raise TopicError(f"{topic.path / 'samples'}: cannot train the topic model: {exc}") from None
    rows = cross_validate_all(topic.samples, folds, anchor_floor=settings.anchor_floor)
    report = TrainReport(topic=topic.name, page_classifier=settings.page_classifier, model_dir=out_dir,
                         model_version=0, sources=dict(model.sources_), rows=rows,
                         reason=relevance_reason(topic, model.sources_["relevance"]))
    save_topic_model(model, out_dir, cv_report=report.to_dict()["cv"])
    report.model_version = int(read_model_header(out_dir)["model_version"])
    chosen = PAGE_CV_KEYS.get(report.sources.get("relevance", ""), "")
    warn_if_at_chance(topic, report.accuracy(chosen), "the page classifier")
    log.info("trained topic %s:\n%s", topic.name, report.render())
    return report


def cross_validate_all(samples: TopicSamples, folds: int, anchor_floor: float = 0.01) -> list[CVRow]:
    """A :class:`CVRow` for every classifier (VSM only when the samples carry keywords)."""
    pages = samples.relevant + samples.irrelevant
    page_labels = [1] * len(samples.relevant) + [0] * len(samples.irrelevant)
    stats = samples.target + samples.nontarget
    stats_labels = [1] * len(samples.target) + [0] * len(samples.nontarget)
    anchors = [text for text, _ in samples.anchors]
    anchor_labels = [int(label) for _, label in samples.anchors]
    plan: list[tuple[str, str, str, Callable[[], Any], list[Any], list[int]]] = [
        ("nb", "page NB", "pages", NaiveBayesTextClassifier, pages, page_labels),
        ("kde-nb", "page KDE-NB", "pages", KDENaiveBayes, pages, page_labels),
        ("gaussian-nb", "page GaussianNB (baseline)", "pages", GaussianNBText, pages, page_labels),
    ]
    if PositionVSM(samples.keywords).usable:
        plan.append(("vsm", "page VSM (keywords)", "pages",
                     lambda: PositionVSM(samples.keywords), pages, page_labels))
    plan += [
        ("svm", "result-page SVM", "result pages", ResultPageClassifier, stats, stats_labels),
        ("anchor-nb", "anchor NB", "anchors", lambda: AnchorSimilarity(floor=anchor_floor),
         anchors, anchor_labels),
    ]
    rows = []
    for key, name, data, make, X, y in plan:
        try:
            scores = cv_fold_scores(make(), X, y, folds)
        except ValueError as exc:  # e.g. a fold without usable words
            log.warning("cross-validation of %s failed: %s", name, exc)
            scores = np.zeros(0)
        rows.append(CVRow(key, name, data, len(X), [float(score) for score in scores]))
    return rows
