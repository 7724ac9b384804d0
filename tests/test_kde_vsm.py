"""KDE-NB (docs/algorithms.md §2.6), the position-weighted VSM (§4.1) and the TopicModel's
page-classifier choice, on hand-made data and on a sandbox topic directory."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.stats import norm

from jlse.models import compiled
from jlse.models.kde_nb import GaussianNBText, KDENaiveBayes, TfidfFeatures
from jlse.models.tokenizer import tokenize
from jlse.models.topic_model import TopicModel, TopicSamples, cv_fold_scores
from jlse.models.vsm import DEFAULT_POSITION_WEIGHTS, PositionVSM, normalised_weights
from jlse.sandbox import build_web
from jlse.topic import load_topic

HAN = re.compile("[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def phones(tmp_path_factory) -> TopicSamples:
    directory = tmp_path_factory.mktemp("phones")
    build_web().write_topic_dir("phones", directory, n_samples=30)
    return load_topic(directory).samples


def _split(samples: TopicSamples) -> tuple[list[str], list[int], list[str], list[int]]:
    """Even-numbered pages of each class to train, odd-numbered ones to test."""
    pages = samples.relevant + samples.irrelevant
    labels = [1] * len(samples.relevant) + [0] * len(samples.irrelevant)
    train = [i for i in range(len(pages)) if i % 2 == 0]
    test = [i for i in range(len(pages)) if i % 2 == 1]
    return ([pages[i] for i in train], [labels[i] for i in train],
            [pages[i] for i in test], [labels[i] for i in test])


def _toy_kde(evidence_features: int | None = None, bandwidth: str = "per-class") -> KDENaiveBayes:
    """A KDE-NB over two words with known training vectors (idf 1 for both)."""
    arrays = {
        "idf": np.array([1.0, 1.0]),
        "train_matrix": np.array([[0.8, 0.6], [1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.1, 0.9]]),
        "train_labels": np.array([1, 1, 0, 0, 0]),
    }
    params = {"max_features": 2, "max_chars": 2000, "evidence_features": evidence_features, "bandwidth": bandwidth}
    header = {"params": params,
              "features": {"params": {"max_features": 2, "max_chars": 2000}, "vocabulary": ["apple", "banana"]}}
    return KDENaiveBayes.from_state(arrays, header)


# --- TF-IDF features -------------------------------------------------------------------------

def test_tfidf_follows_the_formula() -> None:
    texts = ["apple apple banana", "apple cherry", "apple banana banana banana"]
    features = TfidfFeatures(max_features=10).fit(texts)
    assert features.vocabulary_ == ["apple", "banana", "cherry"]  # by frequency: 4, 4 (ties by term), 1
    matrix = features.transform(["banana banana cherry apple"]).toarray()[0]
    raw = np.array([1 * math.log(3 / 3), 2 * math.log(3 / 2), 1 * math.log(3 / 1)])
    assert matrix == pytest.approx(raw / np.linalg.norm(raw))
    assert matrix[0] == 0.0  # a word found in every training text weighs nothing
    assert features.transform(["", "durian"]).nnz == 0


def test_tfidf_keeps_the_most_frequent_terms() -> None:
    features = TfidfFeatures(max_features=2).fit(["apple apple apple banana banana cherry", "apple banana"])
    assert features.vocabulary_ == ["apple", "banana"]


# --- KDE-NB ---------------------------------------------------------------------------------

@pytest.mark.parametrize("bandwidth", ["per-class", "mean-class"])
def test_kde_density_matches_a_hand_computation(bandwidth: str) -> None:
    model = _toy_kde(bandwidth=bandwidth)
    classes = (np.array([[0.6, 0.8], [0.0, 1.0], [0.1, 0.9]]), np.array([[0.8, 0.6], [1.0, 0.0]]))

    def sigma(vectors: np.ndarray) -> float:  # the paper's 1/sqrt(n_c), or 1/sqrt(mean class size)
        return 1 / math.sqrt(len(vectors) if bandwidth == "per-class" else 2.5)

    def log_density(value: float, vectors: np.ndarray, j: int) -> float:
        return math.log(norm.pdf(value, loc=vectors[:, j], scale=sigma(vectors)).mean())

    x = [0.5, 0.7]
    expected = [sum(log_density(x[j], vectors, j) for j in range(2)) for vectors in classes]
    assert model.class_log_likelihood(csr_matrix(x)).ravel() == pytest.approx(expected)
    # the zero-feature shortcut gives the full formula for a vector holding a 0
    expected = [log_density(0.0, vectors, 0) + log_density(1.0, vectors, 1) for vectors in classes]
    assert model.class_log_likelihood(csr_matrix([[0.0, 1.0]]))[0] == pytest.approx(expected)


def test_kde_sums_over_all_training_vectors_on_a_sparse_vocabulary(phones) -> None:
    pages = phones.relevant + phones.irrelevant
    model = KDENaiveBayes().fit(pages, [1] * len(phones.relevant) + [0] * len(phones.irrelevant))
    rng = np.random.default_rng(0)
    columns = rng.integers(0, model.train_matrix_.shape[1], 300)
    values = np.concatenate([np.zeros(50), rng.random(250)])
    for c, vectors in enumerate(model.class_vectors_):  # every kernel, zeros included
        sigma = model.sigma_[c]
        expected = np.log(norm.pdf(values[:, None], loc=vectors[:, columns].T, scale=sigma).mean(axis=1))
        assert model._log_density(values, columns, c) == pytest.approx(expected, rel=1e-12)


def test_kde_scores_tokenised_texts_as_it_scores_texts(phones) -> None:
    pages = phones.relevant + phones.irrelevant
    model = KDENaiveBayes().fit(pages, [1] * len(phones.relevant) + [0] * len(phones.irrelevant))
    texts = ["最新手机评测 battery camera", "football scores tonight", "", "手机"]
    assert model.predict_proba_tokens([tokenize(text) for text in texts]) == pytest.approx(
        model.predict_proba(texts), rel=1e-12)
    assert model.predict_proba_tokens([]).shape == (0,)


@pytest.mark.parametrize("evidence_features", [50, 5, None])
def test_kde_compiled_posteriors_are_the_numpy_steps(phones, evidence_features) -> None:
    pages = phones.relevant + phones.irrelevant
    model = KDENaiveBayes(evidence_features=evidence_features).fit(
        pages, [1] * len(phones.relevant) + [0] * len(phones.irrelevant))
    texts = pages + ["最新手机评测 battery camera battery", "football scores tonight", "", "手机"]
    documents = [tokenize(text) for text in texts]
    assert compiled.kernel("_kde_kernel", "posteriors") is not None, "make dev installs numba"
    found = model.predict_proba_tokens(documents)
    assert found == pytest.approx(model._posteriors_arrays(documents), rel=1e-9, abs=1e-300)
    assert 0 < found.min() < 0.5 < found.max() < 1


def test_kde_mean_class_bandwidth_survives_unbalanced_classes(phones) -> None:
    pages = phones.relevant + phones.irrelevant
    labels = [1] * len(phones.relevant) + [0] * len(phones.irrelevant)
    # 4 folds of 60 pages train on 22 vs 23: per-class bandwidths swamp the evidence (module doc)
    assert cv_fold_scores(KDENaiveBayes(bandwidth="per-class"), pages, labels, 4).mean() < 0.6
    assert cv_fold_scores(KDENaiveBayes(), pages, labels, 4).mean() >= 0.9
    with pytest.raises(ValueError, match="bandwidth"):
        KDENaiveBayes(bandwidth="wide").fit(pages, labels)


def test_kde_posterior_is_prior_plus_likelihoods() -> None:
    model = _toy_kde(evidence_features=None)
    vector = np.array([2.0, 1.0]) / math.sqrt(5)  # "apple apple banana"
    likelihood = model.class_log_likelihood(csr_matrix(vector))[0]
    log_odds = math.log(2 / 3) + likelihood[1] - likelihood[0]
    assert model.log_odds(["apple apple banana"])[0] == pytest.approx(log_odds)
    assert model.predict_proba(["apple apple banana"])[0] == pytest.approx(1 / (1 + math.exp(-log_odds)))


def test_kde_temperature_keeps_decisions_and_spares_short_texts(phones) -> None:
    pages = phones.relevant + phones.irrelevant
    labels = [1] * len(phones.relevant) + [0] * len(phones.irrelevant)
    plain = KDENaiveBayes(evidence_features=None).fit(pages, labels)
    tempered = KDENaiveBayes(evidence_features=5).fit(pages, labels)
    probe = pages + ["手机评测", "football scores"]
    assert ((plain.predict_proba(probe) > 0.5) == (tempered.predict_proba(probe) > 0.5)).all()
    assert np.abs(tempered.predict_proba(pages) - 0.5).max() < np.abs(plain.predict_proba(pages) - 0.5).max()
    assert tempered.predict_proba(["手机评测"]) == pytest.approx(plain.predict_proba(["手机评测"]))


def test_kde_separates_held_out_chinese_and_english_pages(phones) -> None:
    train, train_labels, test, test_labels = _split(phones)
    model = KDENaiveBayes().fit(train, train_labels)
    correct = model.predict(test) == np.array(test_labels)
    chinese = np.array([len(HAN.findall(text)) > 0.3 * len(text) for text in test])
    assert chinese.any() and (~chinese).any()
    assert correct[chinese].mean() >= 0.8 and correct[~chinese].mean() >= 0.8
    scores = model.predict_proba(test)
    assert ((0.0 <= scores) & (scores <= 1.0)).all()


def test_gaussian_baseline_cross_validates(phones) -> None:
    pages = phones.relevant + phones.irrelevant
    labels = [1] * len(phones.relevant) + [0] * len(phones.irrelevant)
    assert cv_fold_scores(GaussianNBText(), pages, labels, 4).mean() >= 0.7
    model = GaussianNBText().fit(pages, labels)
    assert model.predict_proba([]).shape == (0,) and model.predict([]).shape == (0,)
    assert ((model.predict_proba(pages) > 0.5) == model.predict(pages)).all()


def test_kde_bad_input() -> None:
    with pytest.raises(ValueError, match="both classes"):
        KDENaiveBayes().fit(["phone", "camera"], [1, 1])
    with pytest.raises(ValueError, match="no usable words"):
        KDENaiveBayes().fit(["的", "!!"], [1, 0])
    model = KDENaiveBayes().fit(["phone review", "pasta recipe"], [1, 0])
    scores = model.predict_proba([None, "", "unknown words"])  # type: ignore[list-item]
    assert scores.shape == (3,) and np.isfinite(scores).all()
    assert model.predict_proba([]).shape == (0,)


# --- position-weighted VSM ------------------------------------------------------------------

def test_vsm_weights_are_normalised() -> None:
    assert sum(PositionVSM(["phone"]).position_weights.values()) == pytest.approx(1.0)
    weights = normalised_weights({"title": 3, "body": 1})
    assert weights == {"title": 0.75, "body": 0.25}
    assert PositionVSM(["phone"], weights={"title": 2, "body": 2}).position_weights == {"title": 0.5, "body": 0.5}
    assert DEFAULT_POSITION_WEIGHTS["title"] == 0.3
    with pytest.raises(ValueError, match="unknown blocks"):
        PositionVSM(["phone"], weights={"footer": 1.0})
    with pytest.raises(ValueError, match="non-negative"):
        PositionVSM(["phone"], weights={"title": -1.0, "body": 2.0})


def test_vsm_title_match_beats_body_match() -> None:
    vsm = PositionVSM(["smartphone review"])
    in_title = vsm.relevance_blocks({"title": "Smartphone review", "body": "the weather is mild today"})
    in_body = vsm.relevance_blocks({"title": "weather today", "body": "Smartphone review"})
    assert in_title > in_body > 0
    assert in_title == pytest.approx(0.3)  # cos = 1 in the title, 0 elsewhere
    assert vsm.relevance_blocks({}) == 0.0
    assert PositionVSM(["的"]).usable is False


def test_vsm_learns_idf_from_a_corpus() -> None:
    vsm = PositionVSM(["phone review"])
    assert vsm.relevance("phone") == pytest.approx(vsm.relevance("review"))  # no corpus: idf 1
    corpus = ["phone shop", "phone case", "phone review", "phone news"]
    fitted = PositionVSM(["phone review"]).fit(corpus)
    assert fitted.relevance("review") > fitted.relevance("phone")
    assert fitted.relevance("phone review") == pytest.approx(1.0)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(["title", "headings", "meta", "anchor", "body", "other"]),
                       st.text(alphabet="phone review 手机评测 abc", max_size=60)))
def test_vsm_relevance_lies_in_unit_interval(blocks: dict[str, str]) -> None:
    score = PositionVSM(["phone review", "手机"]).relevance_blocks(blocks)
    assert 0.0 <= score <= 1.0


# --- TopicModel page-classifier choice --------------------------------------------------------

@pytest.mark.parametrize(("choice", "source"), [("nb", "page_nb"), ("kde-nb", "page_kde_nb"), ("vsm", "vsm")])
def test_topic_model_for_each_page_classifier(phones, choice: str, source: str) -> None:
    train, train_labels, test, test_labels = _split(phones)
    samples = TopicSamples(relevant=[t for t, y in zip(train, train_labels, strict=True) if y],
                           irrelevant=[t for t, y in zip(train, train_labels, strict=True) if not y],
                           anchors=phones.anchors, keywords=phones.keywords)
    model = TopicModel(page_classifier=choice).fit(samples)
    assert model.sources_["relevance"] == source
    assert model.context_source_ == "page_kde_nb"
    predicted = np.array([model.is_relevant(text) for text in test])
    assert (predicted == np.array(test_labels, dtype=bool)).mean() >= 0.8
    assert model.relevance(test[0]) == model.relevance_page(test[0])
    links = ["手机评测 华为 新品", "smartphone review camera battery", "红烧肉做法", "football league table"]
    context = model.context_relevance(links)
    assert context.shape == (4,) and context[:2].min() > context[2:].max()
    assert model.context_relevance([]).shape == (0,)


def test_vsm_topic_model_with_keywords_only_uses_the_blocks() -> None:
    model = TopicModel(relevance_threshold=0.5, page_classifier="vsm").fit(
        TopicSamples(keywords=["智能手机", "smartphone"]))
    assert model.sources_["relevance"] == "vsm" and model.context_source_ == "relevance_model"
    title_page = {"title": "smartphone deals", "body": "weather and football"}
    body_page = {"title": "weather", "body": "smartphone deals and football news today"}
    assert model.relevance_page("", title_page) > model.relevance_page("", body_page)
    assert model.relevance_page("", title_page) >= 0.5  # VSM score 0.15 clears the VSM threshold 0.1
    assert model.relevance_page("", {"title": "pasta", "body": "recipes"}) == 0.0
    # the VSM score is rescaled so that its threshold lands on relevance_threshold
    raw = model.relevance_model_.relevance_blocks(body_page)
    assert 0 < raw < 0.1 and model.relevance_page("", body_page) == pytest.approx(raw / 0.1 * 0.5)
    assert model.context_relevance(["smartphone"]) == pytest.approx(model.relevance_texts(["smartphone"]))
    assert model.context_relevance(["smartphone"])[0] > 0.5
    assert model.relevance_page("this smartphone", None) == model.relevance("this smartphone")


def test_vsm_without_keywords_falls_back(phones) -> None:
    samples = TopicSamples(relevant=phones.relevant, irrelevant=phones.irrelevant)
    assert TopicModel(page_classifier="vsm").fit(samples).sources_["relevance"] == "page_nb"
    with pytest.raises(ValueError, match="page_classifier"):
        TopicModel(page_classifier="svm")


def test_relevance_page_with_bad_blocks_uses_the_text() -> None:
    model = TopicModel(page_classifier="vsm").fit(TopicSamples(keywords=["smartphone"]))
    assert model.relevance_page("a smartphone", ["not", "a", "dict"]) == model.relevance("a smartphone")  # type: ignore[arg-type]


def test_every_page_classifier_the_settings_offer_is_a_model() -> None:
    from jlse.settings import PAGE_CLASSIFIERS

    samples = TopicSamples(relevant=["smartphone screen battery"] * 3,
                           irrelevant=["football match goal"] * 3, keywords=["smartphone"])
    for choice in PAGE_CLASSIFIERS:
        model = TopicModel(page_classifier=choice).fit(samples)
        assert model.relevance("a smartphone with a big screen") > model.relevance("a goal")
    with pytest.raises(ValueError, match="page_classifier"):
        TopicModel(page_classifier="svm")
