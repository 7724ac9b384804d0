"""The context-graph focused crawler (CFC; Diligenti et al., VLDB 2000), learned from the crawl.

CFC ranks a page's out-links by how many links the page itself is from a target: a page in
layer 0 is a target, a page in layer i links to a layer i-1 page, and "other" is none of these
within ``n_layers`` links. A classifier over the layers (multinomial NB on the page text) puts
each fetched page in a layer, and the crawler fetches the links of the lowest layer first.

Where the paper builds the layers from a search engine's backlinks of the seed targets, no such
service exists here (nor offline), so the layers are learned from the crawl itself, as JLSE
learns G_w: the backlinks of a page are the fetched pages that link to it. Every ``cf`` results
the pages seen so far are labelled by the links from each to the nearest page judged relevant,
and the layer classifier is fitted again (``learner.context_graph``). Until the first fit, the
topic model's P(relevant | page) stands in: layer 0 or "other".

Pages are hashed (``HashingVectorizer`` over :func:`models.tokenizer.tokenize`), so a page
seen by the crawl is tokenised once and no vocabulary has to be kept in step between rounds.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.sparse import csr_matrix, vstack
from scipy.special import softmax
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.naive_bayes import MultinomialNB

from jlse.models.holder import ModelHolder
from jlse.models.naive_bayes import DEFAULT_MAX_CHARS, text_sample
from jlse.models.strategies import Strategy
from jlse.models.tokenizer import tokenize

if TYPE_CHECKING:
    from typing import Self

HASHED_FEATURES = 2**18
EVIDENCE_TOKENS = 10  # the page NB's temperature (models.naive_bayes): posteriors not all 0 or 1

_VECTORIZER = HashingVectorizer(
    tokenizer=tokenize, lowercase=False, token_pattern=None, n_features=HASHED_FEATURES,
    alternate_sign=False, norm=None,
)


def hashed_counts(texts: list[str], max_chars: int = DEFAULT_MAX_CHARS) -> csr_matrix:
    """Token counts of each text (sampled to ``max_chars``) in ``HASHED_FEATURES`` columns."""
    return _VECTORIZER.transform([text_sample(text or "", max_chars) for text in texts]).tocsr()


def context_layers(page_keys: np.ndarray, edge_pages: np.ndarray, edge_keys: np.ndarray,
                   relevant_keys: np.ndarray, n_layers: int) -> np.ndarray:
    """Each page's layer: the fewest links from it to a relevant page, through seen pages.

    Pages are identified by URL keys: ``page_keys[i]`` is page i, which links to the URL
    ``edge_keys[j]`` wherever ``edge_pages[j] == i``; ``relevant_keys`` are the relevant pages
    (layer 0). A page more than ``n_layers`` links from every relevant page is "other" =
    ``n_layers + 1``. One vectorised step per layer, never a loop over pages.
    """
    other = n_layers + 1
    layers = np.full(len(page_keys), other, dtype=np.int64)
    layers[np.isin(page_keys, relevant_keys)] = 0
    reached = np.asarray(relevant_keys)
    for distance in range(1, n_layers + 1):
        linking = np.unique(edge_pages[np.isin(edge_keys, reached)])
        linking = linking[layers[linking] == other]
        layers[linking] = distance
        reached = page_keys[linking]
    return layers


def layer_priority(probabilities: np.ndarray, n_layers: int) -> np.ndarray:
    """Link priority from a page's layer probabilities (rows: pages; columns: 0..n, other).

    The most probable layer decides the queue, as in CFC: layer 0 above layer 1 above ... above
    "other". Within a queue, pages closer to a target in expectation come first.
    """
    other = n_layers + 1
    value = np.append(1.0 - np.arange(n_layers + 1) / (n_layers + 1), 0.0)  # layer 0 -> 1
    expected = probabilities @ value
    layer = probabilities.argmax(axis=1)
    rank = np.where(layer == other, 0, n_layers + 1 - layer)
    return (rank + expected) / (n_layers + 2)


class LayerModel:
    """Multinomial NB over the layers 0..``n_layers`` and "other", on hashed token counts."""

    def __init__(self, n_layers: int, version: int = 0,
                 evidence_tokens: int = EVIDENCE_TOKENS) -> None:
        self.n_layers = n_layers
        self.version = version
        self.evidence_tokens = evidence_tokens

    def fit(self, counts: csr_matrix, layers: np.ndarray) -> Self:
        layers = np.asarray(layers, dtype=np.int64)
        if len(np.unique(layers)) < 2:
            raise ValueError("LayerModel.fit: needs pages of at least two layers")
        if layers.min() < 0 or layers.max() > self.n_layers + 1:
            raise ValueError(f"LayerModel.fit: layers must lie in 0..{self.n_layers + 1}")
        self.nb_ = MultinomialNB(alpha=1.0).fit(counts, layers)
        self.layer_counts_ = np.bincount(layers, minlength=self.n_layers + 2)
        return self

    def probabilities(self, counts: csr_matrix) -> np.ndarray:
        """P(layer | page) for each row, one column per layer 0..n and "other" (a layer with no
        training page gets 0), tempered like the page NB so long pages are not all 0 or 1."""
        joint = self.nb_.predict_joint_log_proba(counts)
        n_tokens = np.asarray(counts.sum(axis=1)).ravel()
        joint = joint / np.maximum(1.0, n_tokens / self.evidence_tokens)[:, None]
        result = np.zeros((counts.shape[0], self.n_layers + 2))
        result[:, self.nb_.classes_] = softmax(joint, axis=1)
        return result


def url_keys(urls: Sequence[str]) -> np.ndarray:
    """64-bit keys of URLs (Python's string hash: the log lives in one process only)."""
    return np.fromiter(map(hash, urls), dtype=np.int64, count=len(urls))


@dataclass
class LoggedPages:
    """What the layer learner reads: the sampled pages, their out-links, every relevant page."""

    page_keys: np.ndarray  # one URL key per logged page
    counts: csr_matrix  # hashed token counts, one row per logged page
    edge_pages: np.ndarray  # row number of the page a link is on
    edge_keys: np.ndarray  # URL key of the link's target
    relevant_keys: np.ndarray  # every relevant page seen, logged or not


class PageLog:
    """The pages the crawl has seen, for the layer learner: a uniform sample of at most
    ``capacity`` pages with their text and out-links (reservoir sampling, so memory stays
    bounded on a long crawl), and the key of every relevant page (8 bytes each)."""

    def __init__(self, capacity: int, seed: int = 0) -> None:
        self.capacity = max(1, capacity)
        self._pages: list[tuple[int, csr_matrix, np.ndarray]] = []
        self._relevant: list[int] = []
        self._seen = 0
        self._random = np.random.default_rng(seed)
        self._lock = threading.Lock()

    def add(self, url: str, counts: csr_matrix, link_urls: Sequence[str], relevant: bool) -> None:
        entry = (hash(url), counts, url_keys(link_urls))
        with self._lock:
            self._seen += 1
            if relevant:
                self._relevant.append(entry[0])
            if len(self._pages) < self.capacity:
                self._pages.append(entry)
                return
            slot = int(self._random.integers(0, self._seen))
            if slot < self.capacity:
                self._pages[slot] = entry

    def snapshot(self) -> LoggedPages:
        with self._lock:
            pages, relevant = list(self._pages), np.array(self._relevant, dtype=np.int64)
        if not pages:
            empty = np.zeros(0, dtype=np.int64)
            return LoggedPages(empty, csr_matrix((0, HASHED_FEATURES)), empty, empty, relevant)
        keys, rows, links = zip(*pages, strict=True)
        lengths = [len(link_keys) for link_keys in links]
        return LoggedPages(
            page_keys=np.array(keys, dtype=np.int64), counts=vstack(rows, format="csr"),
            edge_pages=np.repeat(np.arange(len(pages)), lengths),
            edge_keys=np.concatenate(links).astype(np.int64), relevant_keys=relevant,
        )

    def __len__(self) -> int:
        return len(self._pages)


class ContextGraphStrategy(Strategy):
    """``cfc``: every out-link of a page gets the priority of the page's layer.

    ``layer_model`` holds the current :class:`LayerModel` (None before the first fit; the
    learner thread sets it); the strategy logs every page it sees in ``page_log`` for the
    learner. Soft focus: every page is expanded ("other" pages' links wait at the bottom).
    """

    name = "cfc"
    learns = "pages"
    embedded_only = True
    focused = False

    def __init__(self, layer_model: ModelHolder, page_log: PageLog, n_layers: int = 3,
                 max_chars: int = DEFAULT_MAX_CHARS, **base: Any) -> None:
        super().__init__(**base)
        self.layer_model = layer_model
        self.page_log = page_log
        self.n_layers = n_layers
        self.max_chars = max_chars
        # observe_page and score_links see the same text: it is tokenised once
        self._counts = functools.lru_cache(maxsize=64)(self._hash)

    def _hash(self, text: str) -> csr_matrix:
        return hashed_counts([text], self.max_chars)

    def observe_page(self, url: str, page_text: str, relevance: float | None,
                     link_urls: Sequence[str]) -> None:
        relevant = relevance is not None and relevance >= self.relevance_threshold
        self.page_log.add(url, self._counts(page_text), link_urls, relevant)

    def score_links(self, page_relevance, depth, anchors, urls, contexts,
                    parent_priority=1.0, page_text="", page_url="") -> np.ndarray:
        if len(urls) == 0:
            return np.zeros(0)
        model = self.layer_model.get()
        if model is None:
            probabilities = self._from_relevance(page_relevance)
        else:
            probabilities = model.probabilities(self._counts(page_text))
        return np.full(len(urls), layer_priority(probabilities, self.n_layers)[0])

    def _from_relevance(self, page_relevance: float | None) -> np.ndarray:
        relevance = 1.0 if page_relevance is None else float(page_relevance)
        probabilities = np.zeros((1, self.n_layers + 2))
        probabilities[0, 0] = relevance
        probabilities[0, -1] = 1.0 - relevance
        return probabilities
