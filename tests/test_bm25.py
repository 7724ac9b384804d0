"""Field BM25 (hand-computed on a 3-document corpus) and the link index over G_w's vertices."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from jlse.models import link_index
from jlse.models.bm25 import FieldBM25
from jlse.models.link_index import (
    TEXT_CHARS,
    LinkIndex,
    _url_parts,
    _url_parts_by_urlsplit,
    url_tokens,
)
from jlse.models.link_tokens import link_text_tokens, url_tokens_many
from jlse.models.sparse_rows import product, top_per_row, top_postings
from jlse.models.tokenizer import tokenize

# N = 3 documents of lengths 3, 2, 4: avgdl = 3, k1 = 2, b = 0.75.
CORPUS = [["apple", "banana", "apple"], ["banana", "cherry"], ["cherry", "date", "egg", "fig"]]
IDF_1 = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))  # a term in one document: ln(8/3)
IDF_2 = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))  # in two documents: ln(1.6)
IDF_UNKNOWN = math.log(1 + (3 - 0 + 0.5) / (0 + 0.5))  # in none: ln(8)
# f(t,d)(k1+1) / (f(t,d) + k1(1 - b + b|d|/avgdl)) by hand:
W_APPLE_D0 = 2 * 3 / (2 + 2 * (0.25 + 0.75 * 3 / 3))  # tf 2 in a length-3 doc: 1.5
W_BANANA_D0 = 1 * 3 / (1 + 2.0)  # 1.0
W_D1 = 1 * 3 / (1 + 2 * (0.25 + 0.75 * 2 / 3))  # any term of the length-2 doc: 1.2
W_D2 = 1 * 3 / (1 + 2 * (0.25 + 0.75 * 4 / 3))  # any term of the length-4 doc: 6/7


@pytest.fixture(scope="module")
def bm25() -> FieldBM25:
    return FieldBM25(k1=2.0, b=0.75).fit(CORPUS)


def test_learned_statistics_match_the_formulas(bm25: FieldBM25) -> None:
    assert bm25.n_docs_ == 3 and bm25.avgdl_ == pytest.approx(3.0)
    idf = dict(zip(bm25.vocabulary_, bm25.idf_[list(bm25.vocabulary_.values())], strict=True))
    assert idf["apple"] == pytest.approx(IDF_1) and idf["banana"] == pytest.approx(IDF_2)
    weights = bm25.doc_weights_.toarray()
    column = bm25.vocabulary_
    assert weights[0, column["apple"]] == pytest.approx(W_APPLE_D0)
    assert weights[0, column["banana"]] == pytest.approx(W_BANANA_D0)
    assert weights[1, column["cherry"]] == pytest.approx(W_D1)
    assert weights[2, column["fig"]] == pytest.approx(W_D2)
    assert weights[1, column["apple"]] == 0


def test_scores_are_bm25_divided_by_the_upper_bound(bm25: FieldBM25) -> None:
    scores = bm25.score([["apple", "banana"]]).toarray()[0]
    bound = (IDF_1 + IDF_2) * 3
    assert scores[0] == pytest.approx((IDF_1 * W_APPLE_D0 + IDF_2 * W_BANANA_D0) / bound, rel=1e-6)
    assert scores[1] == pytest.approx(IDF_2 * W_D1 / bound, rel=1e-6)
    assert scores[2] == 0


def test_unknown_terms_count_in_the_bound_only(bm25: FieldBM25) -> None:
    known, with_unknown = bm25.score([["banana"], ["banana", "kiwi"]]).toarray()
    assert known[1] == pytest.approx(IDF_2 * W_D1 / (IDF_2 * 3), rel=1e-6)
    assert with_unknown[1] == pytest.approx(IDF_2 * W_D1 / ((IDF_2 + IDF_UNKNOWN) * 3), rel=1e-6)
    assert with_unknown[1] < known[1]


def test_a_query_is_the_set_of_its_terms(bm25: FieldBM25) -> None:
    once, twice = bm25.score([["apple"], ["apple", "apple"]]).toarray()
    np.testing.assert_array_equal(once, twice)
    assert once[0] == pytest.approx(W_APPLE_D0 / 3, rel=1e-6)


def test_empty_and_unknown_queries_score_zero(bm25: FieldBM25) -> None:
    scores = bm25.score([[], ["kiwi", "mango"]])
    assert scores.shape == (2, 3) and scores.nnz == 0


def test_fit_on_no_documents_scores_nothing() -> None:
    empty = FieldBM25().fit([])
    assert empty.score([["apple"]]).shape == (1, 0)
    all_empty = FieldBM25().fit([[], []])
    assert all_empty.score([["apple"]]).nnz == 0


@pytest.mark.parametrize("k1, b", [(0.0, 0.75), (-1.0, 0.5), (2.0, 1.5), (2.0, -0.1)])
def test_impossible_parameters_are_refused(k1: float, b: float) -> None:
    with pytest.raises(ValueError, match="k1|b must"):
        FieldBM25(k1=k1, b=b).fit(CORPUS)


words = st.sampled_from(["a1", "b2", "c3", "d4", "e5", "f6", "g7"])


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.lists(words, max_size=8), min_size=1, max_size=8),
       queries=st.lists(st.lists(words | st.just("zz"), max_size=5), min_size=1, max_size=4))
def test_scores_lie_in_unit_interval_and_match_a_direct_sum(docs, queries) -> None:
    bm25 = FieldBM25().fit(docs)
    scores = bm25.score(queries).toarray()
    assert np.all(scores >= 0) and np.all(scores < 1)
    avgdl = sum(map(len, docs)) / len(docs)
    for q, query in enumerate(queries):
        terms = set(query)
        n_t = {t: sum(t in doc for doc in docs) for t in terms}
        idf = {t: math.log(1 + (len(docs) - n + 0.5) / (n + 0.5)) for t, n in n_t.items()}
        bound = sum(idf.values()) * 3
        for d, doc in enumerate(docs):
            raw = sum(idf[t] * doc.count(t) * 3 / (doc.count(t) + 2 * (0.25 + 0.75 * len(doc) / avgdl))
                      for t in terms if t in doc)
            assert scores[q, d] == pytest.approx(raw / bound if bound else 0.0, rel=1e-5, abs=1e-7)


# --- the link index -----------------------------------------------------------------------

VERTICES = (
    ["smartphone battery review", "football match report", "pasta recipe", "手机 电池 评测"],
    ["http://phones.test/reviews/battery.html", "http://sport.test/football/match-report",
     "http://food.test/recipes/pasta", "http://shouji.test/pingce/dianchi"],
    ["long battery life and fast charging test", "goal striker league season",
     "tomato basil sauce dinner", "这款手机的续航时间很长"],
)


@pytest.fixture(scope="module")
def index() -> LinkIndex:
    return LinkIndex().fit(*VERTICES)


def test_each_link_maps_to_its_obviously_closest_vertex(index: LinkIndex) -> None:
    best, score = index.best_vertices(
        ["battery review", "match report", "好吃的面条", "手机电池"],
        ["http://phones.test/reviews/x", "http://sport.test/football/y",
         "http://food.test/recipes/noodles", "http://other.test/a"],
        ["charging test", "league season", "sauce", "续航"],
    )
    assert best.tolist() == [0, 1, 2, 3]
    assert np.all(score > 0) and np.all(score < 1)


def test_a_link_matching_nothing_gets_minus_one(index: LinkIndex) -> None:
    best, score = index.best_vertices(["zebra crossing"], ["http://nowhere.test/"], [""])
    assert best.tolist() == [-1] and score.tolist() == [0.0]
    best, score = index.best_vertices([], [], [])
    assert best.shape == (0,) and score.shape == (0,)


def test_field_weights_decide_between_fields() -> None:
    # The anchor matches vertex 1 exactly, the context matches vertex 2 exactly.
    link = (["football match report"], ["http://elsewhere.test/"], ["tomato basil sauce dinner"])
    by_anchor, _ = LinkIndex(weights=(0.5, 0.2, 0.3)).fit(*VERTICES).best_vertices(*link)
    by_context, _ = LinkIndex(weights=(0.1, 0.1, 0.8)).fit(*VERTICES).best_vertices(*link)
    assert by_anchor.tolist() == [1] and by_context.tolist() == [2]


def test_the_score_is_the_weighted_sum_of_field_scores(index: LinkIndex) -> None:
    link = (["battery review"], ["http://phones.test/reviews/x"], ["charging test"])
    best, score = index.best_vertices(*link)
    fields = [f.score([tokens]).toarray()[0, 0] for f, tokens in zip(
        index.fields_, (["battery", "review"], ["phones", "reviews", "x"], ["charging", "test"]),
        strict=True)]
    assert best[0] == 0
    assert score[0] == pytest.approx(float(np.dot((0.5, 0.2, 0.3), fields)), rel=1e-6)


def test_ties_go_to_the_lowest_vertex() -> None:
    twins = LinkIndex().fit(["x", "same words", "same words"], ["", "", ""], ["", "", ""])
    best, _ = twins.best_vertices(["same words"], [""], [""])
    assert best.tolist() == [1]


def test_mismatched_lengths_and_bad_weights_are_refused(index: LinkIndex) -> None:
    with pytest.raises(ValueError, match="link triples"):
        index.best_vertices(["a", "b"], ["http://a.test/"], ["c"])
    with pytest.raises(ValueError, match="weights"):
        LinkIndex(weights=(0.5, 0.5)).fit(*VERTICES)
    with pytest.raises(ValueError, match="weights"):
        LinkIndex(weights=(0.5, -0.2, 0.7)).fit(*VERTICES)


def test_url_tokens_keep_host_path_and_query_words() -> None:
    assert url_tokens("http://www.phones.example.com/reviews/Battery_Life.html?id=42&q=x") == [
        "phones", "example", "reviews", "battery", "life", "id", "42", "q", "x"]
    assert url_tokens("http://[::1") == [] and url_tokens(None) == []  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["http://www.a-b.example.com/x/Y_z.html?q=1&r=t+u#f", "not a url",
                                 "http://[::1", "https://h.org/%E4%B8%AD%E6%96%87/", "HTTP://X.Y/7",
                                 "http://a.b/x%00y/z", "http://h.test/caf%C3%A9?x=%00", ""])
                | st.text(alphabet=st.sampled_from(list("aZ09:/?#.%-_+ &=中é")), max_size=30)
                .map(lambda tail: "http://" + tail) | st.none(), max_size=10))
def test_url_tokens_many_is_url_tokens_of_each_url(urls: list) -> None:
    assert url_tokens_many(urls) == [url_tokens(url) for url in urls]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet=st.sampled_from(list("ab 1'-中文手机.Ｘé")), max_size=20),
                          st.text(alphabet=st.sampled_from(list("cd 2'-评测手机,Ｙè")), max_size=40)),
                max_size=8))
def test_link_text_tokens_are_the_tokens_of_anchor_plus_context(links: list) -> None:
    anchors, contexts = [a for a, _ in links], [c for _, c in links]
    expected = [tokenize(f"{anchor} {context}") for anchor, context in links]
    assert list(map(list, link_text_tokens(anchors, contexts))) == expected
    # the contexts the link index tokenised (cached) give the same tokens
    link_index.field_tokens(anchors, ["http://a.test/"] * len(links), contexts)
    assert list(map(list, link_text_tokens(anchors, contexts))) == expected


def test_fitted_vocabularies_map_each_token_to_its_first_appearance() -> None:
    docs = [["b", "a", "b"], ["c", "a"], [], ["d"]]
    assert FieldBM25().fit(docs).vocabulary_ == {"b": 0, "a": 1, "c": 2, "d": 3}
    odd = [["x\x00y", "z"], [3, "z"]]  # NUL in a token, a token not a string: kept as they are
    assert FieldBM25().fit(odd).vocabulary_ == {"x\x00y": 0, "z": 1, 3: 2}


@pytest.mark.parametrize("seed", range(6))
def test_the_sparse_product_is_scipys_to_the_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    queries = sp.random(rng.integers(0, 9), 40, density=0.2, random_state=seed, format="csr",
                        dtype=np.float32)
    postings = sp.random(40, 70, density=rng.choice([0.0, 0.1, 0.5]), random_state=seed + 9,
                         format="csr", dtype=np.float32)
    mine, scipys = product(queries, postings), (queries @ postings).tocsr()
    mine.sort_indices()
    scipys.sort_indices()
    assert mine.shape == scipys.shape and mine.dtype == scipys.dtype
    np.testing.assert_array_equal(mine.indptr, scipys.indptr)
    np.testing.assert_array_equal(mine.indices, scipys.indices)
    np.testing.assert_array_equal(mine.data, scipys.data)
    wide = product(queries.astype(np.float64), postings)  # mixed dtypes: scipy's own product
    np.testing.assert_allclose(wide.toarray(), scipys.toarray(), rtol=1e-6)
    with pytest.raises(ValueError, match="shapes"):
        product(queries, postings[:30])


def test_fit_texts_tokenises_each_distinct_text_once_and_fits_like_fit() -> None:
    texts = ["red apple", "green apple pie", "red apple", None, "pie pie pie", "red apple"]
    calls: list[str] = []

    def tokens(text: str) -> list[str]:
        calls.append(text)
        return text.split()

    by_texts = FieldBM25().fit_texts(texts, tokens)
    by_docs = FieldBM25().fit([t.split() if isinstance(t, str) else [] for t in texts])
    assert sorted(calls) == sorted({"red apple", "green apple pie", "", "pie pie pie"})
    assert by_texts.vocabulary_ == by_docs.vocabulary_
    np.testing.assert_array_equal(by_texts.idf_, by_docs.idf_)
    assert by_texts.avgdl_ == by_docs.avgdl_ and by_texts.n_docs_ == 6
    assert (by_texts.doc_weights_ != by_docs.doc_weights_).nnz == 0


# --- the capped (approximate) search ------------------------------------------------------

def zipf_triples(seed: int, n: int, n_words: int = 400) -> tuple[list[str], list[str], list[str]]:
    """Link triples of Zipf-distributed words: many vertices share the head terms."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}x" for i in range(n_words)])
    p = 1.0 / np.arange(10, n_words + 10)
    draw = lambda k: " ".join(rng.choice(words, k, p=p / p.sum()))  # noqa: E731
    return ([draw(3) for _ in range(n)],
            [f"http://site{rng.integers(20)}.test/{draw(1)}/{draw(1)}" for _ in range(n)],
            [draw(12) for _ in range(n)])


@pytest.fixture(scope="module")
def zipf_index() -> LinkIndex:
    return LinkIndex(max_postings=(64, 64, 4), rescore=4).fit(*zipf_triples(1, 1500))


def test_exact_search_is_the_argmax_of_all_scores(zipf_index: LinkIndex) -> None:
    links = zipf_triples(2, 60)
    dense = zipf_index.scores(*links).toarray()
    best, score = zipf_index.best_vertices(*links, exact=True)
    np.testing.assert_array_equal(best, np.where(dense.max(axis=1) > 0, dense.argmax(axis=1), -1))
    np.testing.assert_allclose(score, dense.max(axis=1), rtol=1e-6)
    uncapped = LinkIndex.from_fields(zipf_index.fields_, zipf_index.weights, max_postings=None)
    np.testing.assert_array_equal(uncapped.best_vertices(*links)[0], best)


def test_capped_search_reports_the_exact_score_of_the_vertex_it_picks(zipf_index) -> None:
    links = zipf_triples(3, 200)
    dense = zipf_index.scores(*links).toarray()
    best, score = zipf_index.best_vertices(*links)
    assert np.all(best >= 0)
    np.testing.assert_allclose(score, dense[np.arange(len(best)), best], rtol=1e-5)
    exact_best, exact_score = zipf_index.best_vertices(*links, exact=True)
    assert np.all(score <= exact_score * (1 + 1e-6))
    # The caps bind (the commonest anchor term is in 121 anchors, a context term in up to 410
    # contexts), yet the re-ranked candidates usually hold the best vertex, and when they do
    # not, the vertex picked scores nearly as well.
    assert 0.8 <= np.mean(best == exact_best) < 1.0
    assert np.mean((exact_score - score) / exact_score) < 0.02


def test_a_cap_can_hide_the_best_vertex_and_exact_finds_it() -> None:
    # Contexts of equal length: every posting weighs the same, and a cap of one posting per term
    # keeps the lowest vertex of each: 0 for "zebra", 1 for "lion". Vertex 2 has both words.
    contexts = ["zebra f1x f2x", "lion f3x f4x", "zebra lion f5x"]
    index = LinkIndex(max_postings=1, rescore=2).fit(["a0", "a1", "a2"], [""] * 3, contexts)
    link = (["nothing"], [""], ["zebra lion"])
    assert index.best_vertices(*link, exact=True)[0].tolist() == [2]
    assert index.best_vertices(*link)[0].tolist() == [0]


def test_re_ranking_adds_what_the_capped_postings_left_out() -> None:
    # Vertices 0 and 1 match the anchor equally; only 1 also has the context word, but the capped
    # postings of "tiger" keep vertex 2 (the shorter context) alone. Re-ranking finds vertex 1.
    index = LinkIndex(max_postings=(None, None, 1), rescore=1).fit(
        ["cat", "cat", "dog"], ["", "", ""], ["f1x f2x", "tiger f3x", "tiger"])
    tiger = index.offsets_[2] + index.fields_[2].vocabulary_["tiger"]
    assert index.postings_[tiger].indices.tolist() == [2]
    best, score = index.best_vertices(["cat"], [""], ["tiger"])
    assert best.tolist() == [1]
    assert score[0] == pytest.approx(index.scores(["cat"], [""], ["tiger"])[0, 1], rel=1e-6)


def test_answers_are_remembered_and_unhashable_input_is_still_searched(zipf_index) -> None:
    links = zipf_triples(4, 5)
    first = zipf_index.best_vertices(*links)
    again = zipf_index.best_vertices(*links)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert all(link in zipf_index._answers for link in zip(*links, strict=True))
    odd = zipf_index.best_vertices([["not", "a", "string"]], [links[1][0]], [links[2][0]])
    assert odd[0].shape == (1,)


@pytest.mark.parametrize("max_postings, rescore", [(0, 4), ((4, 4), 4), ("10", 4), (8, 0), (2.5, 4),
                                                    ((8, None, -1), 4)])
def test_impossible_search_parameters_are_refused(max_postings, rescore) -> None:
    with pytest.raises(ValueError, match="max_postings|rescore"):
        LinkIndex(max_postings=max_postings, rescore=rescore).fit(*VERTICES)


def test_texts_are_cut_to_the_same_length_for_vertices_and_links() -> None:
    long_context = "filler " * 60 + "needle"  # "needle" starts after TEXT_CHARS characters
    assert len(long_context) > TEXT_CHARS + 6
    index = LinkIndex().fit(["x"], ["http://a.test/"], [long_context])
    assert "needle" not in index.fields_[2].vocabulary_
    assert index.best_vertices(["y"], ["http://b.test/"], ["needle"])[0].tolist() == [-1]


def test_top_postings_keeps_the_largest_weights_and_the_lowest_vertices_among_ties() -> None:
    postings = sp.csr_matrix(np.array([[0.5, 0.9, 0.5, 0.5, 0.1],
                                       [0.0, 0.2, 0.0, 0.0, 0.0],
                                       [0.3, 0.3, 0.3, 0.3, 0.3]], dtype=np.float32))
    capped = top_postings(postings, 2).toarray()
    expected = [[0.5, 0.9, 0, 0, 0], [0, 0.2, 0, 0, 0], [0.3, 0.3, 0, 0, 0]]
    np.testing.assert_array_equal(capped, np.array(expected, dtype=np.float32))
    assert top_postings(postings, None) is postings


def test_top_per_row_keeps_the_k_best_ties_included() -> None:
    scores = sp.csr_matrix(np.array([[0.1, 0.5, 0.4, 0.5], [0.0, 0.0, 0.0, 0.0],
                                     [0.3, 0.0, 0.01, 0.2]]))
    rows, columns = top_per_row(scores, 2)
    assert list(zip(rows.tolist(), columns.tolist(), strict=True)) == [(0, 1), (0, 3), (2, 0),
                                                                       (2, 3)]
    rows, columns = top_per_row(scores, 3, min_ratio=0.5)  # 0.01 < half of 0.3: left out
    assert list(zip(rows.tolist(), columns.tolist(), strict=True)) == [(0, 1), (0, 2), (0, 3),
                                                                       (2, 0), (2, 3)]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("aZ09:/?#@[]%.-_+~ &=\t中é")), max_size=30),
       st.sampled_from(["", "http://", "https://", "HTTP://", "a+b://", "1x://", "//"]))
def test_the_fast_url_split_agrees_with_urlsplit(tail: str, scheme: str) -> None:
    url = scheme + tail
    assert _url_parts(url) == _url_parts_by_urlsplit(url)


def test_many_links_are_searched_in_batches_with_the_same_answers(monkeypatch) -> None:
    vertices, links = zipf_triples(5, 300), zipf_triples(6, 10)
    whole = LinkIndex().fit(*vertices).best_vertices(*links)
    monkeypatch.setattr(link_index, "SEARCH_BATCH", 3)
    batched = LinkIndex().fit(*vertices).best_vertices(*links)
    np.testing.assert_array_equal(whole[0], batched[0])
    np.testing.assert_allclose(whole[1], batched[1])
