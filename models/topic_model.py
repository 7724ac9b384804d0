"""The topic model a crawl uses: page relevance, result-page test, anchor and link-text relevance.

:class:`TopicModel` fits what the samples allow and falls back for missing parts:

- relevance (``page_classifier``): ``"nb"`` multinomial NB or ``"kde-nb"`` kernel-density NB
  (:mod:`models.kde_nb`) on relevant/irrelevant pages; ``"vsm"`` the position-weighted VSM of
  the keywords (:mod:`models.vsm`; idf learnt from the sample pages when there are any). Without
  page samples of both kinds (a keyword-only topic): the VSM of the keywords whatever the
  choice (docs/algorithms.md §4: the model the paper gives keyword queries); when no keyword
  is usable by it, the keyword overlap of :class:`KeywordOverlap`; without keywords, a
  (tempered) NB over the labelled anchors.
- target pages: the RBF SVM on target/nontarget page stats; without both, :class:`TargetRule`.
- anchor similarity: GTSAT's NB over the labelled anchors; without both labels, the relevance
  model applied to the anchor text, with GTSAT's rule (``floor`` below ``relevance_threshold``).
- link-text relevance (:meth:`TopicModel.context_relevance`, of a page's links
  :meth:`TopicModel.link_text_relevance`): a KDE-NB on the sample pages whatever the page
  classifier; without both kinds of pages, the relevance model.

VSM scores live on another scale (the paper's threshold 0.1, docs/algorithms.md §4.1) than posteriors (0.5), and the crawl
compares relevance with ``relevance_threshold``. So a VSM score s is reported as the monotone
piecewise-linear map of [0, 1] onto itself taking the VSM threshold to ``relevance_threshold``:
ranks and the VSM's own relevant/irrelevant decision are kept.

A topic with nothing to judge relevance by is a ValueError.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.model_selection import StratifiedKFold, cross_val_score

from jlse.models.anchor import AnchorSimilarity
from jlse.models.kde_nb import KDENaiveBayes
from jlse.models.link_tokens import link_text_tokens, link_texts
from jlse.models.naive_bayes import DEFAULT_MAX_CHARS, NaiveBayesTextClassifier, text_sample
from jlse.models.page_stats import PageStats
from jlse.models.result_page import ResultPageClassifier, TargetRule
from jlse.models.tokenizer import tokenize
from jlse.models.vsm import PositionVSM
from jlse.settings import PAGE_CLASSIFIERS

if TYPE_CHECKING:
    from typing import Self

logger = logging.getLogger(__name__)



@dataclass
class TopicSamples:
    """In-memory samples of a topic (the lead's loader fills them from the topic directory)."""

    relevant: list[str] = field(default_factory=list)  # page texts
    irrelevant: list[str] = field(default_factory=list)
    target: list[PageStats] = field(default_factory=list)
    nontarget: list[PageStats] = field(default_factory=list)
    anchors: list[tuple[str, int]] = field(default_factory=list)  # (text, 1 relevant / 0 irrelevant)
    keywords: list[str] = field(default_factory=list)

    def fingerprint(self) -> str:
        """sha256 of the samples' content: a saved model fitted on other samples is stale."""
        content = {
            "relevant": self.relevant, "irrelevant": self.irrelevant,
            "target": [stats.to_dict() for stats in self.target],
            "nontarget": [stats.to_dict() for stats in self.nontarget],
            "anchors": [[text, int(label)] for text, label in self.anchors], "keywords": self.keywords,
        }
        encoded = json.dumps(content, ensure_ascii=False, sort_keys=True).encode("utf-8", "replace")
        return hashlib.sha256(encoded).hexdigest()


class KeywordOverlap:
    """A crude stand-in relevance for keyword-only topics: for each keyword (phrase), the share
    of its tokens found in the text; the text's score is the best keyword's share, in [0, 1].
    """

    def __init__(self, keywords: Sequence[str], max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.max_chars = max_chars
        tokenised = (frozenset(tokenize(keyword)) for keyword in keywords)
        self.keyword_tokens_ = [tokens for tokens in tokenised if tokens]  # stop-word-only keywords dropped

    @property
    def usable(self) -> bool:
        return bool(self.keyword_tokens_)

    def relevance(self, text: str) -> float:
        found = set(tokenize(text_sample(text, self.max_chars) if isinstance(text, str) else ""))
        return max((len(tokens & found) / len(tokens) for tokens in self.keyword_tokens_), default=0.0)

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.relevance(text) for text in texts], dtype=float)

    def get_state(self) -> tuple[dict[str, np.ndarray], dict]:
        tokens = [sorted(keyword) for keyword in self.keyword_tokens_]
        return {}, {"max_chars": self.max_chars, "keyword_tokens": tokens}

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], header: dict) -> KeywordOverlap:
        model = cls([], max_chars=header["max_chars"])
        model.keyword_tokens_ = [frozenset(tokens) for tokens in header["keyword_tokens"]]
        return model


class TopicModel:
    """Everything the crawl asks of a topic: page relevance, ``is_target``, anchor similarity
    and link-text relevance. ``page_classifier`` is one of :data:`PAGE_CLASSIFIERS`."""

    def __init__(self, relevance_threshold: float = 0.5, anchor_floor: float = 0.01,
                 page_classifier: str = "nb", balance_scripts: bool = True) -> None:
        if page_classifier not in PAGE_CLASSIFIERS:
            raise ValueError(f"page_classifier: unknown {page_classifier!r}; "
                             f"available: {', '.join(PAGE_CLASSIFIERS)}")
        self.relevance_threshold = relevance_threshold
        self.anchor_floor = anchor_floor
        self.page_classifier = page_classifier
        self.balance_scripts = balance_scripts  # the page NB: see NaiveBayesTextClassifier

    def fit(self, samples: TopicSamples) -> Self:
        """Fit every part the samples allow; ``self.sources_`` names what each part uses
        (``self.context_source_`` for :meth:`context_relevance`)."""
        relevance_name, self.relevance_model_ = self._fit_relevance(samples)
        target_name, self.target_model_ = self._fit_target(samples)
        anchor_name, self.anchor_model_ = self._fit_anchor(samples)
        self.sources_ = {"relevance": relevance_name, "target": target_name, "anchor": anchor_name}
        self.context_source_, self.context_model_ = self._fit_context(samples)
        self.keyword_view_ = self._fit_keyword_view(samples)
        self.fingerprint_ = samples.fingerprint()
        logger.info("topic model fitted: %s, context: %s", self.sources_, self.context_source_)
        return self

    def relevance_page(self, text: str, blocks: dict[str, str] | None = None) -> float:
        """Relevance of a page in [0, 1]: the VSM scores ``blocks`` (the parser's position
        blocks) when it is the relevance model and they are given; every other model ``text``."""
        if isinstance(self.relevance_model_, PositionVSM) and blocks is not None:
            if isinstance(blocks, Mapping):
                return float(self._rescaled(np.array([self.relevance_model_.relevance_blocks(blocks)]))[0])
            logger.warning("relevance_page: blocks is a %s, not a mapping; using the text",
                           type(blocks).__name__)
        return float(self.relevance_texts([text])[0])

    def relevance(self, text: str) -> float:
        """P(relevant | page text) in [0, 1] (a keyword score for keyword-only topics)."""
        return self.relevance_page(text)

    def relevance_texts(self, texts: Sequence[str]) -> np.ndarray:
        """The relevance model's score of each text, shape (n,)."""
        if len(texts) == 0:
            return np.zeros(0)
        return self._rescaled(self.relevance_model_.predict_proba(texts))

    def is_relevant(self, text: str) -> bool:
        return self.relevance(text) >= self.relevance_threshold

    def is_target(self, stats: PageStats) -> bool:
        return self.target_model_.is_target(stats)

    def anchor_similarity(self, anchors: Sequence[str]) -> np.ndarray:
        """sim_anchor of each anchor text of a page's out-links, shape (n,)."""
        if self.anchor_model_ is not None:
            return self.anchor_model_.similarities(anchors)
        posteriors = self.relevance_texts(anchors)
        return np.where(posteriors >= self.relevance_threshold, posteriors, self.anchor_floor)

    def context_relevance(self, texts: Sequence[str]) -> np.ndarray:
        """P(relevant) of short link texts (anchor + context), shape (n,): the KDE-NB of the
        sample pages, or the relevance model when there was none to fit."""
        if len(texts) == 0:
            return np.zeros(0)
        if self.context_model_ is not None:
            return self.context_model_.predict_proba(texts)
        return self.relevance_texts(texts)

    def link_text_relevance(self, anchors: Sequence[str], contexts: Sequence[str]) -> np.ndarray:
        """:meth:`context_relevance` of each link's ``anchor + " " + context``, shape (n,); the
        KDE-NB reads the tokens the link index has just cached (``link_text_tokens``)."""
        if len(anchors) == 0:
            return np.zeros(0)
        if self.context_model_ is not None:
            return self.context_model_.predict_proba_tokens(link_text_tokens(anchors, contexts))
        return self.relevance_texts(link_texts(anchors, contexts))

    def cross_validate(self, samples: TopicSamples, folds: int = 5) -> dict[str, float]:
        """Mean accuracy of each classifier under stratified k-fold (nan: < 2 samples per class)."""
        if folds < 2:
            raise ValueError(f"cross_validate: folds must be at least 2, got {folds}")
        pages, page_labels = _labelled(samples.relevant, samples.irrelevant)
        stats, stats_labels = _labelled(samples.target, samples.nontarget)
        anchors = [text for text, _ in samples.anchors]
        anchor_labels = [int(label) for _, label in samples.anchors]
        return {
            "relevance": _cv_accuracy(self._page_estimator(samples), pages, page_labels, folds),
            "target": _cv_accuracy(ResultPageClassifier(), stats, stats_labels, folds),
            "anchor": _cv_accuracy(AnchorSimilarity(floor=self.anchor_floor), anchors, anchor_labels, folds),
        }

    def _rescaled(self, scores: np.ndarray) -> np.ndarray:
        """VSM scores mapped so the VSM threshold lands on ``relevance_threshold`` (module doc)."""
        if not isinstance(self.relevance_model_, PositionVSM):
            return scores
        cut = min(max(self.relevance_model_.threshold, 1e-9), 1 - 1e-9)
        return np.interp(scores, [0.0, cut, 1.0], [0.0, self.relevance_threshold, 1.0])

    def _page_estimator(self, samples: TopicSamples) -> Any:
        """An unfitted page classifier of the chosen kind (NB when VSM has no keywords)."""
        if self.page_classifier == "kde-nb":
            return KDENaiveBayes()
        if self.page_classifier == "vsm":
            vsm = PositionVSM(samples.keywords)
            if vsm.usable:
                return vsm
        return NaiveBayesTextClassifier(balance_scripts=self.balance_scripts)

    def _fit_relevance(self, samples: TopicSamples) -> tuple[str, Any]:
        has_pages = bool(samples.relevant and samples.irrelevant)
        if self.page_classifier == "vsm":
            vsm = PositionVSM(samples.keywords)
            if vsm.usable:
                return "vsm", vsm.fit(samples.relevant + samples.irrelevant) if has_pages else vsm
            logger.warning("topic: page_classifier vsm needs keywords and the topic has none usable")
        if has_pages:
            texts, labels = _labelled(samples.relevant, samples.irrelevant)
            if self.page_classifier == "kde-nb":
                return "page_kde_nb", KDENaiveBayes().fit(texts, labels)
            page_nb = NaiveBayesTextClassifier(balance_scripts=self.balance_scripts)
            return "page_nb", page_nb.fit(texts, labels)
        if samples.relevant or samples.irrelevant:
            logger.warning("topic: page samples of one class only; not enough for the page classifier")
        vsm = PositionVSM(samples.keywords)
        if vsm.usable:  # a keyword-only topic: the position-weighted VSM whatever the choice
            return "vsm", vsm
        keywords = KeywordOverlap(samples.keywords)
        if keywords.usable:
            return "keywords", keywords
        if _both_labels(samples.anchors):
            texts = [text for text, _ in samples.anchors]
            labels = [int(label) for _, label in samples.anchors]
            return "anchor_nb", NaiveBayesTextClassifier().fit(texts, labels)
        raise ValueError(
            "topic model: nothing to judge relevance by - give relevant and irrelevant sample "
            "pages, keywords, or anchor texts labelled relevant and irrelevant"
        )

    def _fit_target(self, samples: TopicSamples) -> tuple[str, Any]:
        if samples.target and samples.nontarget:
            stats, labels = _labelled(samples.target, samples.nontarget)
            return "svm", ResultPageClassifier().fit(stats, labels)
        if samples.target or samples.nontarget:
            logger.warning("topic: result-page samples of one class only; using the target rule")
        return "rule", TargetRule()

    def _fit_anchor(self, samples: TopicSamples) -> tuple[str, AnchorSimilarity | None]:
        if _both_labels(samples.anchors):
            texts = [text for text, _ in samples.anchors]
            labels = [int(label) for _, label in samples.anchors]
            return "anchor_nb", AnchorSimilarity(floor=self.anchor_floor).fit(texts, labels)
        if samples.anchors:
            logger.warning("topic: anchor samples of one class only; using the relevance model")
        return "relevance_model", None

    def _fit_keyword_view(self, samples: TopicSamples) -> PositionVSM | None:
        """The keywords' VSM beside a page NB: the second view self-training labels pages by
        (:mod:`models.self_training`); None without a page NB or usable keywords."""
        if not isinstance(self.relevance_model_, NaiveBayesTextClassifier):
            return None
        vsm = PositionVSM(samples.keywords)
        return vsm.fit(samples.relevant + samples.irrelevant) if vsm.usable else None

    def _fit_context(self, samples: TopicSamples) -> tuple[str, KDENaiveBayes | None]:
        if isinstance(self.relevance_model_, KDENaiveBayes):
            return "page_kde_nb", self.relevance_model_
        if samples.relevant and samples.irrelevant:
            try:
                texts, labels = _labelled(samples.relevant, samples.irrelevant)
                return "page_kde_nb", KDENaiveBayes().fit(texts, labels)
            except ValueError as exc:
                logger.warning("topic: no KDE-NB for link texts (%s); using the relevance model", exc)
        return "relevance_model", None

    def get_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Every part's arrays (keys ``part.name``) and a JSON-ready header."""
        arrays: dict[str, np.ndarray] = {}
        parts: dict[str, dict | None] = {}
        models = {"relevance": self.relevance_model_, "target": self.target_model_,
                  "anchor": self.anchor_model_, "context": self.context_model_,
                  "keywords": getattr(self, "keyword_view_", None)}
        for part, model in models.items():
            if model is None or (part == "context" and model is self.relevance_model_):
                parts[part] = None
                continue
            part_arrays, header = model.get_state()
            arrays.update({f"{part}.{name}": array for name, array in part_arrays.items()})
            parts[part] = {"class": type(model).__name__, "state": header}
        header = {
            "params": {"relevance_threshold": self.relevance_threshold,
                       "anchor_floor": self.anchor_floor, "page_classifier": self.page_classifier,
                       "balance_scripts": self.balance_scripts},
            "sources": self.sources_, "context_source": self.context_source_,
            "fingerprint": self.fingerprint_, "parts": parts,
        }
        return arrays, header

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], header: dict) -> TopicModel:
        """The model :meth:`get_state` described; KeyError/ValueError/TypeError if malformed."""
        # a model saved before balance_scripts existed was trained without it
        model = cls(**{"balance_scripts": False, **header["params"]})
        built: dict[str, Any] = {}
        for part, description in header["parts"].items():
            if description is None:
                built[part] = None
                continue
            component = _COMPONENTS[description["class"]]
            prefix = f"{part}."
            part_arrays = {key[len(prefix):]: value for key, value in arrays.items() if key.startswith(prefix)}
            built[part] = component.from_state(part_arrays, description["state"])
        model.relevance_model_, model.target_model_ = built["relevance"], built["target"]
        model.anchor_model_ = built["anchor"]
        model.keyword_view_ = built.get("keywords")  # absent from a model saved before it
        model.sources_ = dict(header["sources"])
        model.context_source_ = header["context_source"]
        shared = model.context_source_ == "page_kde_nb" and built["context"] is None
        model.context_model_ = model.relevance_model_ if shared else built["context"]
        model.fingerprint_ = header["fingerprint"]
        return model


_COMPONENTS: dict[str, Any] = {
    cls.__name__: cls
    for cls in (NaiveBayesTextClassifier, KDENaiveBayes, PositionVSM, KeywordOverlap,
                ResultPageClassifier, TargetRule, AnchorSimilarity)
}


def _labelled(positives: Sequence[Any], negatives: Sequence[Any]) -> tuple[list[Any], list[int]]:
    return list(positives) + list(negatives), [1] * len(positives) + [0] * len(negatives)


def _both_labels(anchors: Sequence[tuple[str, int]]) -> bool:
    return {int(label) for _, label in anchors} >= {0, 1}


def _accuracy(estimator: Any, X: Sequence[Any], y: np.ndarray) -> float:
    return float(np.mean(np.asarray(estimator.predict(X)).astype(int) == y))


def cv_fold_scores(estimator: Any, X: list[Any], labels: list[int], folds: int) -> np.ndarray:
    """Accuracy of each stratified fold (``min(folds, smaller class)`` folds, shuffled with a
    fixed seed); empty when a class has fewer than 2 samples."""
    y = np.asarray(labels, dtype=int)
    per_class = np.bincount(y, minlength=2) if len(y) else np.zeros(2, dtype=int)
    if per_class.min() < 2:
        return np.zeros(0)
    splitter = StratifiedKFold(n_splits=min(folds, int(per_class.min())), shuffle=True, random_state=0)
    return cross_val_score(estimator, X, y, cv=splitter, scoring=_accuracy, error_score="raise")


def _cv_accuracy(estimator: Any, X: list[Any], labels: list[int], folds: int) -> float:
    scores = cv_fold_scores(estimator, X, labels, folds)
    return float(np.mean(scores)) if len(scores) else math.nan
