"""Self-training: the page classifier learns from the crawl's own pages (docs/algorithms.md §1.2).

A page NB fitted on a few dozen sample pages knows only the words of those samples, and a crawl
that meets a whole class its irrelevant samples lack (a neighbouring topic) judges that class by
the few words it shares with the topic: on the newswire web, metals' model judged 158 of the
commodities pages it met relevant. The crawl sees hundreds of such pages, so it labels them
itself, by two views that err differently (co-training, Blum & Mitchell 1998; self-training
of NB on unlabelled text, Nigam et al. 2000):

- a page is a *pseudo-positive* when the sample NB and the keywords' VSM both judge it relevant;
- a *pseudo-negative* when the sample NB judges it irrelevant, or when it holds none of the
  keywords (until issue 27's eleventh round only when the NB's posterior was also below 0.9:
  the guard made no difference measured on any web, so the constant was retired);
- other pages (the sample NB judges them relevant, they hold a few keywords but too few for
  the VSM) are *undecided*.

Every :data:`REFIT_EVERY` pseudo-labelled pages the NB is refitted on the samples' word counts
plus the pseudo-labelled pages' (each page weighing as a sample page), over the samples'
vocabulary grown by the pages' words, the class prior kept: the *co-trained* NB. It then judges
the undecided pages, and those it judges irrelevant join the irrelevant pages of a second
refit, the NB the crawl uses (issue 27's twelfth round). "Irrelevant" there is calibrated on
the crawl's own confident pages (issue 27's sixteenth round): below the threshold, or below the
P the co-trained NB gives all but :data:`UNDECIDED_QUANTILE` of the latest pseudo-positives.
NB's posteriors are extreme, so a neighbouring topic's pages that share the topic's words sat
at P .9-1.0 and stayed on the relevant side (newswire economy took 148 trade and money stories
in 1,000 pages); ranked against the pages both views agreed on, many of them fall below. A
neighbouring topic reaches the crawl as undecided pages: its stories share the topic's words
and a few of its keywords. The two views' pseudo-positives were already 93-99% right on the
newswire crawls, but their pseudo-negatives numbered 25-223 against 400-600, so the refitted NB
had never seen the neighbours' words on the irrelevant side. Only negatives are taken: giving
the undecided pages both labels gained nothing.

Labels always come from the sample NB or the co-trained NB, never from the NB the crawl uses,
so an error does not feed on itself. The undecided pages are kept until their words exceed
:data:`MAX_WORDS`; the oldest are then settled by the co-trained NB of the moment, for good.
Each page process (each Celery worker process in distributed mode) learns from the pages it
classifies.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import Counter, deque
from collections.abc import Sequence

import numpy as np

from jlse.models.link_tokens import anchor_tokens
from jlse.models.naive_bayes import NaiveBayesTextClassifier
from jlse.models.topic_model import TopicModel

log = logging.getLogger(__name__)

REFIT_EVERY = 50  # pseudo-labelled pages between refits (a refit costs ~10-30 ms)
UNDECIDED_QUANTILE = 0.02  # an undecided page the co-trained NB rates below this share of the
# crawl's pseudo-positives is taken for irrelevant (1 in 50 confident pages would be; 5% cut a
# simplified-Chinese site out of the sandbox's phones crawl: docs/strategies.md)
POSITIVES_KEPT = 500  # the latest pseudo-positives, for that quantile
MIN_POSITIVES = 20  # pseudo-positives before the quantile is read (a page sample's size)
MAX_WORDS = 200_000  # pseudo-page words kept; past it words seen once are dropped, and the
# oldest undecided pages are settled


class SelfTrainedRelevance:
    """Page relevance by the topic's NB, refitted on the crawl's pseudo-labelled pages.
    Thread-safe: the pipeline scores pages from several threads."""

    def __init__(self, model: TopicModel) -> None:
        self.model = model
        self.base: NaiveBayesTextClassifier = model.relevance_model_
        self.keywords = model.keyword_view_
        self.threshold = model.relevance_threshold
        self.current = self.base
        self.cotrained = self.base  # refitted on the two views' labels only
        self.word_counts = (Counter(), Counter())  # irrelevant, relevant
        self.labelled = [0, 0]
        self.undecided: deque[list[str]] = deque()  # pages the views disagree on, tokenised
        self._undecided_words = 0
        self.settled = Counter()  # words of old undecided pages the co-trained NB judged irrelevant
        self._since_refit = 0
        self._lock = threading.Lock()
        self.positives: deque[list[str]] = deque(maxlen=POSITIVES_KEPT)  # tokenised
        self.cut = self.threshold  # the undecided pages' (:meth:`_undecided_cut`)

    @classmethod
    def of(cls, model: TopicModel | None) -> SelfTrainedRelevance | None:
        """Self-training for ``model``; None when :meth:`why_not` has a reason."""
        return None if cls.why_not(model) else cls(model)

    @staticmethod
    def why_not(model: TopicModel | None) -> str:
        """Why ``model`` cannot be self-trained ("" when it can): it needs a keyword view and
        a sample NB with its word counts (not a VSM or KDE-NB page classifier)."""
        if model is None:
            return "no topic model"
        if getattr(model, "keyword_view_", None) is None:
            return ("the topic has no keywords (add a few to topic.toml: with the samples they "
                    "let the page classifier learn from the crawl's own pages)")
        nb = model.relevance_model_
        if not isinstance(nb, NaiveBayesTextClassifier) or nb.class_counts_ is None:
            return ("pages are not judged by an NB fitted on sample pages of both kinds (a "
                    "keyword-only topic, or page_classifier)")
        return ""

    def relevance(self, text: str) -> float:
        """P(relevant | text) by the current NB; the page may become a pseudo-label. The text
        is tokenised once for both NBs and for learning."""
        tokens = self.base.token_lists([text])
        current = self.current
        score = float(current.predict_proba_tokens(tokens)[0])
        base = score if current is self.base else float(self.base.predict_proba_tokens(tokens)[0])
        label = self._label(base, text)
        if label is not None:
            self._learn(label, tokens[0])
        else:
            self._keep_undecided(tokens[0])
        return score

    def link_text_relevance(self, anchors: Sequence[str], contexts: Sequence[str]) -> np.ndarray:
        """P(relevant | each link's anchor text) by the current NB, shape (n,) (the contexts
        are not read: a listing's link context holds its neighbours' headlines). The refitted
        NB knows the words of the crawl's own pages, so an anchor in the words of a
        neighbouring topic the samples lack ranks low once the crawl has met that topic. The
        anchors' tokens are the ones the link index has just cached."""
        if len(anchors) == 0:
            return np.zeros(0)
        return np.asarray(self.current.predict_proba_tokens(anchor_tokens(anchors)), dtype=float)

    def _label(self, base: float, text: str) -> int | None:
        if base < self.threshold:
            return 0
        keywords = float(self.keywords.relevance(text))
        if keywords >= self.keywords.threshold:
            return 1
        if keywords <= 0.0:
            return 0
        return None

    def _learn(self, label: int, tokens: list[str]) -> None:
        with self._lock:
            if label == 1:
                self.positives.append(tokens)
            self.word_counts[label].update(tokens)
            self.labelled[label] += 1
            self._since_refit += 1
            if self._since_refit < REFIT_EVERY:
                return
            self._since_refit = 0
            self._prune()
            cotrained = refit(self.base, self.word_counts)
            irrelevant = self.word_counts[0] + self.settled
            judged = cotrained.predict_proba_tokens(list(self.undecided)) if self.undecided else ()
            self.cut = self._undecided_cut(cotrained)
            for tokens, relevance in zip(self.undecided, judged, strict=True):
                if relevance < self.cut:
                    irrelevant.update(tokens)
            refitted = refit(self.base, (irrelevant, self.word_counts[1]))
            self.cotrained = cotrained
        self.current = refitted
        log.debug("self-training: refitted on %d relevant and %d irrelevant pages of the crawl "
                  "and %d undecided, %d words", self.labelled[1], self.labelled[0],
                  len(self.undecided), len(refitted.word_log_ratio_))

    def _undecided_cut(self, cotrained: NaiveBayesTextClassifier) -> float:
        """The co-trained P below which an undecided page is taken for irrelevant: the
        :data:`UNDECIDED_QUANTILE` of the crawl's latest pseudo-positives', or the threshold
        where that is higher (or there are fewer than :data:`MIN_POSITIVES`)."""
        if UNDECIDED_QUANTILE <= 0 or len(self.positives) < MIN_POSITIVES:
            return self.threshold
        scores = cotrained.predict_proba_tokens(list(self.positives))
        return max(self.threshold, float(np.quantile(scores, UNDECIDED_QUANTILE)))

    def _keep_undecided(self, tokens: list[str]) -> None:
        with self._lock:
            self.undecided.append(tokens)
            self._undecided_words += len(tokens)
            while self._undecided_words > MAX_WORDS:
                oldest = self.undecided.popleft()
                self._undecided_words -= len(oldest)
                if self.cotrained.predict_proba_tokens([oldest])[0] < self.cut:
                    self.settled.update(oldest)

    def _prune(self) -> None:
        for counts in (*self.word_counts, self.settled):
            if len(counts) > MAX_WORDS:
                for word in [word for word, n in counts.items() if n < 2]:
                    del counts[word]


def refit(base: NaiveBayesTextClassifier, word_counts: tuple[Counter, Counter]
          ) -> NaiveBayesTextClassifier:
    """``base`` with the pages' word counts (irrelevant, relevant) added to its class counts,
    over its vocabulary grown by the pages' words; Laplace smoothing and prior as ``base``'s."""
    vocabulary = dict(base.vectorizer_.vocabulary_)
    for counts in word_counts:
        for word in counts:
            vocabulary.setdefault(word, len(vocabulary))
    totals = np.zeros((2, len(vocabulary)))
    totals[:, :base.class_counts_.shape[1]] = base.class_counts_
    for label, counts in enumerate(word_counts):
        if counts:
            columns = np.fromiter(map(vocabulary.__getitem__, counts), dtype=np.int64,
                                  count=len(counts))
            np.add.at(totals[label], columns, np.fromiter(counts.values(), dtype=float,
                                                          count=len(counts)))
    smoothed = totals + base.alpha
    log_prob = np.log(smoothed) - np.log(smoothed.sum(axis=1, keepdims=True))
    model = copy.copy(base)
    model.vectorizer_ = copy.copy(base.vectorizer_)
    model.vectorizer_.vocabulary_ = vocabulary
    model.word_log_ratio_ = log_prob[1] - log_prob[0]
    model.class_counts_ = totals
    return model
