"""Q-tables (build, save/load, bytes, refusal of bad archives) and the JLSE link evaluator."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from jlse.models import link_tokens
from jlse.models.anchor import AnchorSimilarity, gtsat
from jlse.models.jlse_evaluator import JLSEEvaluator
from jlse.models.link_index import DEFAULT_MAX_POSTINGS, DEFAULT_RESCORE
from jlse.models.qtable import FORMAT_VERSION, HEADER_KEY, QTable, build_qtable

# G_w: seed 0 -> list page 1 -> detail page 2 (a result); seed 0 -> 3 (a dead end).
ANCHORS = ["phone news", "smartphone reviews", "battery test of the new phone", "cooking recipes"]
URLS = ["http://phones.test/", "http://phones.test/reviews/", "http://phones.test/reviews/battery",
        "http://food.test/recipes/"]
CONTEXTS = ["latest phone news", "all smartphone reviews list", "battery life charging review",
            "pasta soup dinner"]
SRC, DST, IS_LEAF = np.array([0, 1, 0]), np.array([1, 2, 3]), np.array([False, False, True, False])
LINKS = (["more smartphone reviews", "soup recipes", "zebra"],
         ["http://phones.test/reviews/page2", "http://food.test/recipes/soup", "http://zoo.test/z"],
         ["smartphone reviews list", "dinner", "animals"])


@pytest.fixture(scope="module")
def qtable() -> QTable:
    return build_qtable(7, ANCHORS, URLS, CONTEXTS, SRC, DST, IS_LEAF, gamma=0.9, reward=1.0)


def flat_anchor_sim(value: float):
    return lambda anchors: np.full(len(anchors), value)


# --- Q-tables ------------------------------------------------------------------------------

def test_build_learns_q_and_records_meta(qtable: QTable) -> None:
    np.testing.assert_allclose(qtable.q, [0.9, 1.0, 1.0, 0.0])
    assert qtable.version == 7 and qtable.index.n_vertices_ == 4
    assert qtable.meta["n_edges"] == 3 and qtable.meta["n_results"] == 1
    assert qtable.meta["iterations"] == 3


def test_predicted_is_best_vertex_score_times_its_q(qtable: QTable) -> None:
    best, score = qtable.index.best_vertices(*LINKS)
    assert best.tolist() == [1, 3, -1]
    predicted = qtable.predicted(*LINKS)
    np.testing.assert_allclose(predicted, [score[0] * 1.0, 0.0, 0.0])
    assert predicted[0] > 0


def assert_same_table(a: QTable, b: QTable) -> None:
    assert (a.version, a.created_at, a.meta) == (b.version, b.created_at, b.meta)
    np.testing.assert_array_equal(a.q, b.q)
    assert a.index.weights == pytest.approx(b.index.weights)
    queries = (ANCHORS + LINKS[0], URLS + LINKS[1], CONTEXTS + LINKS[2])
    scores_a, scores_b = a.index.scores(*queries), b.index.scores(*queries)
    assert scores_a.shape == scores_b.shape and (scores_a != scores_b).nnz == 0
    np.testing.assert_array_equal(a.predicted(*LINKS), b.predicted(*LINKS))


def test_save_and_load_round_trip(qtable: QTable, tmp_path: Path) -> None:
    path = tmp_path / "q.npz"
    qtable.save(path)
    assert_same_table(qtable, QTable.load(path))
    assert [p.name for p in tmp_path.iterdir()] == ["q.npz"]  # no temporary file left behind


def test_bytes_round_trip(qtable: QTable) -> None:
    data = qtable.to_bytes()
    assert_same_table(qtable, QTable.from_bytes(data))
    assert_same_table(qtable, QTable.from_arrays(*qtable.to_arrays()))


def test_numpy_numbers_in_meta_are_saved_as_plain_numbers(qtable: QTable) -> None:
    table = QTable(qtable.version, qtable.index, qtable.q, qtable.created_at,
                   {"iterations": np.int64(3), "gamma": np.float32(0.5)})
    assert QTable.from_bytes(table.to_bytes()).meta == {"iterations": 3, "gamma": 0.5}


def test_the_search_parameters_travel_with_the_table() -> None:
    table = build_qtable(1, ANCHORS, URLS, CONTEXTS, SRC, DST, IS_LEAF, max_postings=(3, None, 2),
                         rescore=5)
    loaded = QTable.from_bytes(table.to_bytes())
    assert loaded.index.caps == (3, None, 2) and loaded.index.rescore == 5
    np.testing.assert_array_equal(loaded.predicted(*LINKS), table.predicted(*LINKS))


def test_an_archive_without_search_parameters_gets_the_defaults(qtable: QTable) -> None:
    arrays, header = qtable.to_arrays()
    del header["max_postings"], header["rescore"]
    loaded = QTable.from_arrays(arrays, header)
    assert loaded.index.caps == DEFAULT_MAX_POSTINGS and loaded.index.rescore == DEFAULT_RESCORE


def test_an_empty_graph_round_trips() -> None:
    empty = build_qtable(1, [], [], [], np.array([], int), np.array([], int), np.array([], bool))
    loaded = QTable.from_bytes(empty.to_bytes())
    assert loaded.index.n_vertices_ == 0
    np.testing.assert_array_equal(loaded.predicted(["phone"], ["http://a.test/"], ["x"]), [0.0])


def write_archive(path: Path, arrays: dict, header: dict) -> None:
    encoded = np.frombuffer(json.dumps(header).encode("utf-8"), np.uint8)
    np.savez(path, **{HEADER_KEY: encoded}, **arrays)


def test_terms_travel_as_one_byte_array_and_format_1_archives_are_still_read(
        qtable: QTable, tmp_path: Path) -> None:
    arrays, header = qtable.to_arrays()
    assert header["format_version"] == FORMAT_VERSION == 2
    for name, field in zip(("anchor", "url", "context"), qtable.index.fields_, strict=True):
        assert arrays[f"{name}.terms"].dtype == np.uint8
        assert "vocabulary" not in header["fields"][name]
        assert header["fields"][name]["n_terms"] == len(field.vocabulary_)
    for name, field in zip(("anchor", "url", "context"), qtable.index.fields_, strict=True):
        del arrays[f"{name}.terms"]  # as format 1 wrote them: a list in the header
        header["fields"][name] = {"vocabulary": field.terms_, "avgdl": field.avgdl_}
    write_archive(tmp_path / "v1.npz", arrays, {**header, "format_version": 1})
    assert_same_table(QTable.load(tmp_path / "v1.npz"), qtable)
    np.testing.assert_allclose(QTable.load(tmp_path / "v1.npz").predicted(*LINKS),
                               qtable.predicted(*LINKS))


def test_a_term_holding_a_nul_is_listed_in_the_header(qtable: QTable) -> None:
    from jlse.models.bm25 import FieldBM25
    from jlse.models.link_index import LinkIndex

    anchor = qtable.index.fields_[0]
    odd = {("odd\x00" + term if term == "phone" else term): column
           for term, column in anchor.vocabulary_.items()}
    field = FieldBM25.from_learned(odd, anchor.idf_, anchor.doc_weights_, anchor.avgdl_,
                                   k1=anchor.k1, b=anchor.b)
    assert not field.packed_terms_.plain and field.packed_terms_.decode() == field.terms_
    index = LinkIndex.from_fields([field, *qtable.index.fields_[1:]], qtable.index.weights)
    table = QTable(version=1, index=index, q=qtable.q, created_at=1.0)
    arrays, header = table.to_arrays()
    assert "anchor.terms" not in arrays and "odd\x00phone" in header["fields"]["anchor"]["vocabulary"]
    assert "url.terms" in arrays
    assert QTable.from_bytes(table.to_bytes()).index.fields_[0].vocabulary_ == odd


def test_load_refuses_another_format_version(qtable: QTable, tmp_path: Path) -> None:
    arrays, header = qtable.to_arrays()
    write_archive(tmp_path / "future.npz", arrays, {**header, "format_version": FORMAT_VERSION + 1})
    with pytest.raises(ValueError, match="format version"):
        QTable.load(tmp_path / "future.npz")


class Payload:
    """Unpickling this object creates ``marker``: proof that pickled code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_load_never_unpickles_an_object_array(qtable: QTable, tmp_path: Path) -> None:
    arrays, header = qtable.to_arrays()
    marker = tmp_path / "unpickled"
    arrays["q"] = np.array([Payload(marker)] * len(qtable.q), dtype=object)
    write_archive(tmp_path / "evil.npz", arrays, header)
    with pytest.raises(ValueError, match="unreadable archive"):
        QTable.load(tmp_path / "evil.npz")
    with pytest.raises(ValueError):
        QTable.from_bytes((tmp_path / "evil.npz").read_bytes())
    assert not marker.exists()
    # The payload is live: loading with pickle allowed would have run it.
    with np.load(tmp_path / "evil.npz", allow_pickle=True) as archive:
        archive["q"]
    assert marker.exists()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "no header", "bad indices", "short q",
                                    "npy", "bad k1", "bad weights", "bad vocabulary",
                                    "bad max_postings", "bad rescore"])
def test_damaged_archives_are_a_value_error(qtable: QTable, damage: str) -> None:
    arrays, header = qtable.to_arrays()
    good = qtable.to_bytes()
    buffer = io.BytesIO()
    if damage == "garbage":
        data = b"not a q-table at all"
    elif damage == "truncated":
        data = good[: len(good) // 2]
    elif damage == "npy":
        np.save(buffer, qtable.q)
        data = buffer.getvalue()
    else:
        if damage == "no header":
            header = None
        elif damage == "bad indices":
            arrays["context.indices"] = arrays["context.indices"] + 1000
        elif damage == "bad k1":
            header["k1"] = "two"
        elif damage == "bad weights":
            header["weights"] = [0.5, 0.5]
        elif damage == "bad max_postings":
            header["max_postings"] = [10, "many", 2]
        elif damage == "bad rescore":
            header["rescore"] = 0
        elif damage == "bad vocabulary":
            header["fields"]["anchor"]["n_terms"] -= 1
        else:
            arrays["q"] = arrays["q"][:-1]
        if header is None:
            np.savez(buffer, **arrays)
        else:
            write_archive(buffer, arrays, header)
        data = buffer.getvalue()
    with pytest.raises(ValueError, match="Q-table"):
        QTable.from_bytes(data)


# --- the evaluator -------------------------------------------------------------------------

def test_before_any_qtable_sim_is_sim_anchor() -> None:
    anchor_model = AnchorSimilarity().fit(["phone review", "new smartphone", "soup recipe",
                                           "football score"], [1, 1, 0, 0])
    evaluator = JLSEEvaluator(anchor_model.similarities, lambda: None)
    np.testing.assert_array_equal(evaluator.similarities(*LINKS),
                                  anchor_model.similarities(LINKS[0]))


def test_anchor_similarity_is_nbs_posterior_and_shares_its_tokens() -> None:
    model = AnchorSimilarity().fit(["phone review", "new smartphone", "soup recipe",
                                    "football score"], [1, 1, 0, 0])
    anchors = ["Phone reviews", "soup of the day", "", "e-mail the new smartphone", "zebra"]
    expected = gtsat(model.nb_.predict_proba(anchors), model.floor)
    np.testing.assert_array_equal(model.similarities(anchors), expected)
    assert all(anchor in link_tokens._TEXT_TOKENS.entries for anchor in anchors)
    odd = ["phone " * 100, None, "smartphone"]  # too long for the shared tokens, not a string
    np.testing.assert_array_equal(model.similarities(odd),
                                  gtsat(model.nb_.predict_proba(odd), model.floor))


def test_sim_is_the_max_of_anchor_and_predicted(qtable: QTable) -> None:
    predicted = qtable.predicted(*LINKS)
    low, high = predicted[0] / 2, predicted[0] * 1.5
    np.testing.assert_allclose(JLSEEvaluator(flat_anchor_sim(low), lambda: qtable)
                               .similarities(*LINKS), [predicted[0], low, low])
    np.testing.assert_allclose(JLSEEvaluator(flat_anchor_sim(high), lambda: qtable)
                               .similarities(*LINKS), [high, high, high])


def test_formula_10_shares_page_relevance_among_out_links(qtable: QTable) -> None:
    evaluator = JLSEEvaluator(flat_anchor_sim(0.01), lambda: qtable)
    sims = evaluator.similarities(*LINKS)
    priorities = evaluator.priorities(0.8, *LINKS)
    assert priorities.sum() == pytest.approx(0.8)
    np.testing.assert_allclose(priorities, 0.8 * sims / sims.sum())
    assert priorities[0] > priorities[1]


def test_the_product_variant(qtable: QTable) -> None:
    evaluator = JLSEEvaluator(flat_anchor_sim(0.01), lambda: qtable, product=True)
    np.testing.assert_allclose(evaluator.priorities(0.8, *LINKS),
                               0.8 * evaluator.similarities(*LINKS))


def test_zero_similarities_give_zero_priorities() -> None:
    evaluator = JLSEEvaluator(flat_anchor_sim(0.0), lambda: None)
    np.testing.assert_array_equal(evaluator.priorities(0.9, *LINKS), [0.0, 0.0, 0.0])
    assert evaluator.priorities(0.9, [], [], []).shape == (0,)


def test_the_qtable_is_read_once_per_call(qtable: QTable) -> None:
    calls = []
    evaluator = JLSEEvaluator(flat_anchor_sim(0.01), lambda: calls.append(1) or qtable)
    evaluator.priorities(0.5, *LINKS)
    assert len(calls) == 1


def test_a_failing_qtable_source_falls_back_to_anchors(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> QTable:
        raise ConnectionError("redis is down")

    evaluator = JLSEEvaluator(flat_anchor_sim(0.3), broken)
    with caplog.at_level(logging.WARNING, logger="jlse.models.jlse_evaluator"):
        sims = evaluator.similarities(*LINKS)
    np.testing.assert_array_equal(sims, [0.3, 0.3, 0.3])
    assert "anchor similarity only" in caplog.text


def test_bad_relevance_and_bad_input(caplog: pytest.LogCaptureFixture) -> None:
    evaluator = JLSEEvaluator(flat_anchor_sim(0.5), lambda: None)
    with caplog.at_level(logging.WARNING, logger="jlse.models.jlse_evaluator"):
        assert evaluator.priorities(float("nan"), *LINKS).tolist() == [0.0, 0.0, 0.0]
        assert evaluator.priorities(1.7, *LINKS).sum() == pytest.approx(1.0)
    assert "NaN" in caplog.text and "clipped" in caplog.text
    with pytest.raises(ValueError, match="link triples"):
        evaluator.similarities(["a"], [], [])
    wrong_shape = JLSEEvaluator(lambda anchors: np.zeros(5), lambda: None)
    with pytest.raises(ValueError, match="anchor_similarity"):
        wrong_shape.similarities(*LINKS)
