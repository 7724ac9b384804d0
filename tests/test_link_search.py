"""The compiled link search against the numpy one: the same vertices and the same floats."""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from jlse.models import compiled, link_search
from jlse.models.link_index import CANDIDATE_RATIO, LinkIndex
from jlse.models.sparse_rows import stack, term_major, top_postings


def compiled_kernel():
    kernel = link_search._kernel()
    assert kernel is not None, "numba is a dependency of jlse: `make dev` installs it"
    return kernel


def zipf_links(rng: np.random.Generator, n: int, n_words: int = 300) -> tuple[list, list, list]:
    words = np.array([f"w{i}x" for i in range(n_words)])
    p = 1.0 / np.arange(10, n_words + 10)
    draw = lambda k: " ".join(rng.choice(words, k, p=p / p.sum()))  # noqa: E731
    return ([draw(rng.integers(0, 5)) for _ in range(n)],
            [f"http://site{rng.integers(20)}.test/{draw(1)}/{draw(1)}" for _ in range(n)],
            [draw(rng.integers(0, 15)) for _ in range(n)])


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("caps", "rescore"), [((16, 16, 2), 1), ((64, 64, 4), 4), ((8, 8, 1), 3)])
def test_compiled_search_is_the_numpy_search_to_the_bit(seed: int, caps, rescore: int) -> None:
    rng = np.random.default_rng(seed)
    index = LinkIndex(max_postings=caps, rescore=rescore).fit(*zipf_links(rng, 800))
    anchors, urls, contexts = zipf_links(rng, 150)
    urls[::10] = ["http://nowhere.test/"] * 15  # with no anchor or context word: no vertex
    anchors[::10], contexts[::10] = [""] * 15, [""] * 15
    queries = index._queries(anchors, urls, contexts)
    doc_weights = [field.doc_weights_ for field in index.fields_]
    expected = link_search.search_arrays(queries, index.postings_, doc_weights, index.offsets_,
                                         rescore, CANDIDATE_RATIO)
    found = link_search.search_compiled(compiled_kernel(), queries, index.postings_, doc_weights,
                                        index.offsets_, rescore, CANDIDATE_RATIO)
    np.testing.assert_array_equal(found[0], expected[0])
    np.testing.assert_array_equal(found[1], expected[1])
    assert (expected[0] == -1).any() and (expected[0] >= 0).mean() > 0.5  # both kinds of link


def grid_matrix(rng: np.random.Generator, shape: tuple[int, int], density: float) -> sp.csr_matrix:
    """Weights on a coarse grid (eighths), so that capped and exact scores often tie."""
    dense = rng.integers(1, 9, shape) / 8.0
    dense[rng.random(shape) >= density] = 0.0
    return sp.csr_matrix(dense.astype(np.float32))


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_ties_are_broken_alike(seed: int, ratio: float) -> None:
    rng = np.random.default_rng(seed)
    n_vertices, sizes = int(rng.integers(1, 40)), rng.integers(1, 12, 3)
    doc_weights = [grid_matrix(rng, (n_vertices, int(size)), 0.3) for size in sizes]
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    postings = stack([top_postings(term_major(weights), int(rng.integers(1, 6)))
                      for weights in doc_weights])
    queries = grid_matrix(rng, (int(rng.integers(1, 20)), int(offsets[-1])), 0.3)
    for rescore in (1, 2, 4):
        expected = link_search.search_arrays(queries, postings, doc_weights, offsets, rescore, ratio)
        found = link_search.search_compiled(compiled_kernel(), queries, postings, doc_weights,
                                            offsets, rescore, ratio)
        np.testing.assert_array_equal(found[0], expected[0])
        np.testing.assert_array_equal(found[1], expected[1])


def test_without_numba_the_numpy_search_answers(monkeypatch, caplog) -> None:
    rng = np.random.default_rng(0)
    index = LinkIndex(max_postings=(16, 16, 2)).fit(*zipf_links(rng, 300))
    links = zipf_links(rng, 50)
    expected = index.best_vertices(*links)
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba now raises ImportError
    monkeypatch.delitem(sys.modules, "jlse.models._link_search_kernel", raising=False)
    monkeypatch.setattr(compiled, "_loaded", {})
    index._answers.clear()
    with caplog.at_level(logging.WARNING, logger="jlse.models.compiled"):
        found = index.best_vertices(*links)
        index._answers.clear()
        index.best_vertices(*links)
    assert compiled.kernel("_link_search_kernel", "search_links") is None
    np.testing.assert_array_equal(found[0], expected[0])
    np.testing.assert_array_equal(found[1], expected[1])
    assert len(caplog.records) == 1 and "numba unavailable" in caplog.records[0].getMessage()
