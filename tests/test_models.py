"""The topic models: tokenizer, page NB, result-page SVM, anchor similarity, TopicModel."""

from __future__ import annotations

import math
import random
import zlib

import jieba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from jlse.models.anchor import AnchorSimilarity
from jlse.models.naive_bayes import (
    NaiveBayesTextClassifier,
    is_chinese,
    script_balanced_weights,
    text_sample,
)
from jlse.models.page_stats import PageStats
from jlse.models.result_page import ResultPageClassifier, TargetRule, feature_matrix, page_features
from jlse.models.tokenizer import STOPWORDS, _segment_run, tokenize
from jlse.models.topic_model import TopicModel, TopicSamples

# --- realistic little corpora: mobile phones (the topic) vs cooking and football -------------

PHONE_ZH = [
    "这款智能手机搭载了最新的处理器，运行速度非常快。",
    "手机的屏幕采用六点七英寸的显示屏，色彩鲜艳。",
    "电池容量达到五千毫安时，支持六十五瓦快充。",
    "新款手机的摄像头夜景拍摄效果出色，像素很高。",
    "华为和小米都发布了新的旗舰手机，价格各有不同。",
    "这款手机支持双卡双待和无线充电功能。",
    "手机系统升级以后，续航时间明显变长了。",
    "苹果手机的芯片性能领先，游戏体验流畅。",
    "智能手机的指纹识别和面部解锁都很方便。",
    "评测显示这款手机的信号和网络速度表现稳定。",
    "手机内存有八个和十二个两种版本可选。",
    "折叠屏手机的铰链设计越来越成熟，屏幕折痕很浅。",
]
PHONE_EN = [
    "The new smartphone has a fast processor and a bright OLED screen.",
    "Battery life on this phone easily lasts a full day with fast charging.",
    "The phone camera takes sharp photos at night with its large sensor.",
    "Samsung and Apple announced new flagship phones with better cameras.",
    "This mobile phone supports dual SIM cards and wireless charging.",
    "Our review of the smartphone covers display, battery and camera quality.",
    "The handset ships with the latest Android update and a faster chip.",
    "A foldable phone screen now survives thousands of folds without damage.",
    "Mobile network speed and signal strength were stable in our phone tests.",
    "The phone offers fingerprint unlock and face recognition.",
    "Storage options for the smartphone range from 128 GB to 512 GB.",
    "Gaming on the phone stays smooth thanks to the high refresh rate display.",
]
OTHER_ZH = [  # cooking and football, alternating in threes so both sides of _split cover both
    "红烧肉的做法：先把五花肉焯水，再用冰糖炒出糖色。",
    "番茄炒蛋的做法很简单，鸡蛋要先炒熟盛出备用。",
    "火锅底料用牛油和辣椒慢慢熬制，做法讲究火候。",
    "这场足球比赛主队在下半场连进两球。",
    "球员在禁区内被犯规，裁判判罚了点球，比赛结果被改写。",
    "中超联赛本赛季的冠军争夺非常激烈，每场比赛都很关键。",
    "饺子馅的做法：猪肉和白菜剁碎，加香油和盐调味。",
    "清蒸鱼的做法要注意火候，蒸八分钟左右就够了。",
    "面条煮好后过一遍凉水，再加酱油和醋调味。",
    "门将扑出了对方前锋的射门，球队保住了比赛的胜利。",
    "教练在赛后表示球队的防守还需要加强。",
    "世界杯预选赛国家队客场战平对手，球队表现让球迷失望。",
]
OTHER_EN = [
    "Brown the beef in a hot pan before adding onions and garlic to the stew recipe.",
    "This bread recipe says to knead the dough for ten minutes and let it rise.",
    "Simmer the tomato sauce slowly and season it with basil and salt; a simple recipe.",
    "The striker scored twice in the second half to win the football match.",
    "The referee awarded a penalty in the match after a foul inside the box.",
    "The goalkeeper saved a powerful shot in the final minute of the football game.",
    "Whisk the eggs with sugar until pale, then fold in the flour for the cake recipe.",
    "Roast the chicken with lemon and rosemary until the skin is crisp, then season with salt.",
    "Boil the pasta in salted water and drain it before mixing with the tomato sauce.",
    "The coach said the team defence must improve before the league final.",
    "Fans filled the stadium to watch the football derby between the two clubs.",
    "The midfielder passed the ball forward and the team scored from a header in the match.",
]


def _pages(sentences: list[str], count: int, seed: int, per_page: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(sentences, per_page)) for _ in range(count)]


def _split(sentences: list[str]) -> tuple[list[str], list[str]]:
    """8 training and 4 held-out sentences, each side covering both sub-topics of a pool."""
    return [s for i, s in enumerate(sentences) if i % 3 != 2], sentences[2::3]


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[str]]:
    """Training pages and held-out pages built from disjoint sentences of each pool."""
    train_rel = _pages(_split(PHONE_ZH)[0], 10, 1) + _pages(_split(PHONE_EN)[0], 10, 2)
    train_irr = _pages(_split(OTHER_ZH)[0], 10, 3) + _pages(_split(OTHER_EN)[0], 10, 4)
    test_rel = _pages(_split(PHONE_ZH)[1], 4, 5, 2) + _pages(_split(PHONE_EN)[1], 4, 6, 2)
    test_irr = _pages(_split(OTHER_ZH)[1], 4, 7, 2) + _pages(_split(OTHER_EN)[1], 4, 8, 2)
    return {"train_rel": train_rel, "train_irr": train_irr, "test_rel": test_rel, "test_irr": test_irr}


@pytest.fixture(scope="module")
def page_nb(corpus) -> NaiveBayesTextClassifier:
    texts = corpus["train_rel"] + corpus["train_irr"]
    labels = [1] * len(corpus["train_rel"]) + [0] * len(corpus["train_irr"])
    return NaiveBayesTextClassifier().fit(texts, labels)


def detail_stats(rng: random.Random) -> PageStats:
    blocks = [rng.randint(40, 300) for _ in range(rng.randint(3, 8))] + [rng.randint(1, 10) for _ in range(5)]
    link_words = rng.randint(80, 250)
    return PageStats(sum(blocks) + link_words, link_words, rng.randint(20, 60), blocks)


def list_stats(rng: random.Random) -> PageStats:
    blocks = [rng.randint(1, 12) for _ in range(rng.randint(10, 40))] + [rng.randint(20, 30)]
    link_words = rng.randint(400, 1500)
    return PageStats(sum(blocks) + link_words, link_words, rng.randint(60, 200), blocks)


def _stats(maker, count: int, seed: int) -> list[PageStats]:
    rng = random.Random(seed)
    return [maker(rng) for _ in range(count)]


RELEVANT_ANCHORS = ["新款智能手机评测", "手机报价", "华为手机", "smartphone review", "best phones 2024",
                    "phone camera test", "小米手机参数", "mobile phone deals"]
IRRELEVANT_ANCHORS = ["红烧肉做法", "足球新闻", "中超积分榜", "football scores", "easy pasta recipes",
                      "bread baking tips", "家常菜谱", "league table"]


def full_samples(corpus) -> TopicSamples:
    anchors = [(a, 1) for a in RELEVANT_ANCHORS] + [(a, 0) for a in IRRELEVANT_ANCHORS]
    return TopicSamples(
        relevant=corpus["train_rel"], irrelevant=corpus["train_irr"],
        target=_stats(detail_stats, 15, 10), nontarget=_stats(list_stats, 15, 11),
        anchors=anchors, keywords=["手机", "smartphone"],
    )


# --- tokenizer ------------------------------------------------------------------------------

def test_chinese_is_segmented_into_words() -> None:
    assert "智能手机" in tokenize("这款智能手机的屏幕很大")
    assert "手机" in tokenize("我的手机没电了")
    assert "红烧肉" in tokenize("我们今天做红烧肉")


def test_stop_words_are_removed() -> None:
    tokens = tokenize("这是我们的手机 and this is the phone of the year")
    assert {"这", "是", "我们", "的", "and", "this", "is", "the", "of"}.isdisjoint(tokens)
    assert {"手机", "phone", "year"} <= set(tokens)
    assert len(STOPWORDS) > 1000


def test_mixed_chinese_and_english() -> None:
    assert tokenize("华为Mate60手机支持5G网络，OLED屏幕") == ["华为", "mate60", "手机", "支持", "5g", "网络", "oled", "屏幕"]


def test_latin_rules() -> None:
    # lower case, full-width folded, accents dropped, digits-only and single letters dropped
    assert tokenize("The iPhone X costs 999 dollars in 2024 at Café ＡＢＣ") == ["iphone", "costs", "dollars", "cafe", "abc"]
    assert tokenize("Don’t miss 4K video; e-mail us!") == ["miss", "4k", "video", "e-mail"]


def test_punctuation_and_whitespace_make_no_tokens() -> None:
    assert tokenize("  ，。！？、——…… \n\t ... --- ''' ") == []
    assert tokenize("") == []


def test_segmentation_matches_jieba_without_hmm() -> None:
    rng = random.Random(0)
    runs = [run for text in PHONE_ZH + OTHER_ZH for run in text.replace("，", "。").split("。") if run]
    runs += ["".join(chr(rng.randint(0x4E00, 0x9FD5)) for _ in range(rng.randint(1, 25))) for _ in range(300)]
    runs += ["一一一", "丁丁丁", "哈哈哈哈哈"]  # exact ties between routes: the longer word wins
    for run in runs:
        assert list(_segment_run(run)) == jieba.lcut(run, HMM=False), run


def test_non_string_input_gives_no_tokens() -> None:
    assert tokenize(None) == []  # type: ignore[arg-type]
    assert tokenize(b"phone") == []  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.text() | st.text(alphabet=st.characters(min_codepoint=0x3000, max_codepoint=0x9FFF)))
def test_tokenize_never_raises(text: str) -> None:
    tokens = tokenize(text)
    assert all(token and token == token.strip() and token not in STOPWORDS for token in tokens)


# --- page Naive Bayes -------------------------------------------------------------------------

def test_nb_separates_held_out_chinese_and_english(page_nb, corpus) -> None:
    relevant = page_nb.predict_proba(corpus["test_rel"])
    irrelevant = page_nb.predict_proba(corpus["test_irr"])
    assert (relevant > 0.5).all(), relevant
    assert (irrelevant < 0.5).all(), irrelevant


def test_nb_posterior_is_a_graded_score(page_nb, corpus) -> None:
    posteriors = page_nb.predict_proba(corpus["test_rel"] + corpus["test_irr"] + corpus["train_rel"])
    assert ((posteriors >= 0.0) & (posteriors <= 1.0)).all()
    assert ((posteriors > 0.0) & (posteriors < 1.0)).all()  # no page is exactly 0 or 1
    assert len(np.unique(np.round(posteriors, 6))) > 5


def test_nb_empty_or_unknown_text_gives_the_prior() -> None:
    texts = ["phone screen battery", "phone camera", "phone price", "football goal"]
    nb = NaiveBayesTextClassifier().fit(texts, [1, 1, 1, 0])
    assert nb.relevance("") == pytest.approx(0.75)
    assert nb.relevance("zebra xylophone 的 了") == pytest.approx(0.75)


def test_nb_matches_hand_computed_multinomial_formula() -> None:
    # tokens: rel = [phone screen phone], [phone battery]; irr = [football goal], [goal screen]
    texts = ["phone screen phone", "phone battery", "football goal", "goal screen"]
    nb = NaiveBayesTextClassifier().fit(texts, [1, 1, 0, 0])
    vocab = 5  # phone screen battery football goal
    words_rel, words_irr = 5, 4

    def p(count: int, total: int) -> float:
        return (1 + count) / (vocab + total)

    # document "phone goal screen screen"
    rel = 0.5 * p(3, words_rel) * p(0, words_rel) * p(1, words_rel) ** 2
    irr = 0.5 * p(0, words_irr) * p(2, words_irr) * p(1, words_irr) ** 2
    assert nb.relevance("phone goal screen screen") == pytest.approx(rel / (rel + irr), rel=1e-9)
    assert nb.log_odds(["phone goal screen screen"])[0] == pytest.approx(math.log(rel / irr), rel=1e-9)


def test_nb_temperature_keeps_decisions_and_tempers_long_texts(page_nb, corpus) -> None:
    long_text = " ".join(corpus["test_rel"] * 10)
    log_odds = page_nb.log_odds([long_text])[0]
    sampled = text_sample(long_text, page_nb.max_chars)  # what NB reads of a long text
    known_tokens = page_nb.vectorizer_.transform([sampled]).sum()
    assert log_odds > 40  # plain NB would say exactly 1.0
    expected = 1 / (1 + math.exp(-log_odds / max(1.0, known_tokens / 10)))
    assert page_nb.relevance(long_text) == pytest.approx(expected)
    assert 0.5 < page_nb.relevance(long_text) < 1.0
    plain = NaiveBayesTextClassifier(evidence_tokens=None).fit(
        corpus["train_rel"] + corpus["train_irr"], [1] * 20 + [0] * 20
    )
    assert plain.relevance(long_text) == 1.0
    assert plain.log_odds([long_text])[0] == pytest.approx(log_odds)


def test_nb_counts_match_the_fitted_vectorizer(page_nb, corpus) -> None:
    texts = corpus["test_rel"] + corpus["test_irr"] + ["", "zebra"]
    fast = page_nb._counts(texts).toarray()
    assert (fast == page_nb.vectorizer_.transform(texts).toarray()).all()


def test_nb_log_odds_are_the_sparse_product_to_the_last_bit(page_nb, corpus) -> None:
    texts = corpus["test_rel"] + corpus["test_irr"] + ["", "zebra", None]  # type: ignore[list-item]
    counts = page_nb._counts(texts)
    expected = page_nb.prior_log_odds_ + counts @ page_nb.word_log_ratio_
    assert np.array_equal(page_nb.log_odds(texts), expected)
    n_tokens = np.asarray(counts.sum(axis=1)).ravel()
    tempered = expit(expected / np.maximum(1.0, n_tokens / page_nb.evidence_tokens))
    assert np.array_equal(page_nb.predict_proba(texts), tempered)


def test_text_sample_spreads_over_long_texts() -> None:
    assert text_sample("short text", 100) == "short text"
    text = "".join(f"{i:04d}" for i in range(1000))  # 4,000 characters
    sample = text_sample(text, 400, windows=4)
    parts = sample.split("\n")
    assert [len(part) for part in parts] == [100] * 4
    assert parts[0] == text[:100] and parts[-1] == text[-100:]
    assert text_sample(text, 3, windows=4) == text[:3]


def test_nb_rejects_unusable_samples() -> None:
    with pytest.raises(ValueError, match="both classes"):
        NaiveBayesTextClassifier().fit(["phone", "camera"], [1, 1])
    with pytest.raises(ValueError, match="labels"):
        NaiveBayesTextClassifier().fit(["phone", "camera"], [1])
    with pytest.raises(ValueError, match="no usable words"):
        NaiveBayesTextClassifier().fit(["the", "的"], [1, 0])


def test_script_balanced_weights_equal_the_chinese_share_and_keep_the_priors() -> None:
    texts = ["手机评测"] * 4 + ["phone review"] * 6 + ["红烧肉做法"] + ["football"] * 9
    labels = np.array([1] * 10 + [0] * 10)
    weights = script_balanced_weights(texts, labels)
    chinese = np.array([is_chinese(text) for text in texts])
    for label in (0, 1):
        mine = labels == label
        assert weights[mine].sum() == pytest.approx(10.0)  # the class prior is kept
        assert weights[mine & chinese].sum() / 10.0 == pytest.approx(0.25)  # 5 of 20 pooled
    one_script = script_balanced_weights(["phone", "football"], np.array([1, 0]))
    assert one_script.tolist() == [1.0, 1.0]


def test_balanced_nb_stops_calling_chinese_pages_of_other_topics_relevant(sandbox_web,
                                                                         tmp_path) -> None:
    """The sandbox's laptops topic: 8 of 20 relevant samples are Chinese, 4 of 20 irrelevant
    ones. Plain NB takes the words common to Chinese pages for evidence of relevance and calls
    most Chinese pages of other topics relevant; weighted to one Chinese share it does not,
    and still calls the topic's pages relevant."""
    from jlse.topic import load_topic
    from jlse.workers.parser import parse_html
    from jlse.workers.pipeline import page_text

    samples = load_topic(sandbox_web.write_topic_dir("laptops", tmp_path / "laptops")).samples
    pages: dict[str, list[str]] = {"other-zh": [], "topic": []}
    for url, html in sandbox_web.search_pages():
        truth = sandbox_web.truth(url)
        kind = "topic" if truth.topic == "laptops" else f"other-{truth.lang}"
        if kind in pages and zlib.crc32(url.encode()) % 4 == 0:
            pages[kind].append(page_text(parse_html(html, url)))
    judged = {}
    for balance in (False, True):
        model = TopicModel(balance_scripts=balance).fit(samples)
        judged[balance] = {kind: float(np.mean(model.relevance_texts(texts) >= 0.5))
                           for kind, texts in pages.items()}
    assert judged[False]["other-zh"] > 0.6, judged  # 0.74 measured
    assert judged[True]["other-zh"] < 0.5, judged  # 0.40 measured
    assert judged[True]["topic"] > 0.95, judged


# --- result-page classifier -----------------------------------------------------------------

@pytest.mark.parametrize(
    "stats",
    [PageStats(), PageStats(0, 0, 5, []), PageStats(10, 50, 0, [0, 0]), PageStats(-3, -1, -2, [100])],
)
def test_page_features_are_finite(stats: PageStats) -> None:
    features = page_features(stats)
    assert features.shape == (3,)
    assert np.isfinite(features).all()
    assert 0.0 <= features[2] <= 1.0


def test_page_features_follow_the_definitions() -> None:
    text_degree, link_degree, aggregation = page_features(PageStats(1000, 199, 63, [500, 100, 19, 19, 163]))
    assert text_degree == pytest.approx(math.log2(802 / 200))
    assert link_degree == pytest.approx(math.log2(64 / 1001))
    assert aggregation == pytest.approx(763 / 1000)


def test_svm_separates_detail_from_list_pages() -> None:
    details, lists = _stats(detail_stats, 20, 1), _stats(list_stats, 20, 2)
    model = ResultPageClassifier().fit(details + lists, [1] * 20 + [0] * 20)
    assert model.predict(_stats(detail_stats, 30, 3)).all()
    assert not model.predict(_stats(list_stats, 30, 4)).any()
    assert model.predict([]).shape == (0,)
    assert model.is_target(detail_stats(random.Random(5))) is True


def test_svm_decision_matches_sklearn() -> None:
    stats = _stats(detail_stats, 15, 12) + _stats(list_stats, 15, 13)
    model = ResultPageClassifier(C=0.5).fit(stats, [1] * 15 + [0] * 15)
    probe = _stats(detail_stats, 10, 14) + _stats(list_stats, 10, 15) + [PageStats(), PageStats(300, 150, 40, [30])]
    standardised = model.scaler_.transform(feature_matrix(probe))
    assert model.decision_function(probe) == pytest.approx(model.svm_.decision_function(standardised))
    assert (model.predict(probe) == (model.svm_.predict(standardised) == 1)).all()


def test_target_rule_without_samples() -> None:
    rule = TargetRule()
    assert rule.predict(_stats(detail_stats, 30, 6)).all()
    assert not rule.predict(_stats(list_stats, 30, 7)).any()
    assert rule.is_target(PageStats()) is False


# --- anchor similarity ----------------------------------------------------------------------

def test_anchor_similarity_is_posterior_or_floor() -> None:
    anchors = RELEVANT_ANCHORS + IRRELEVANT_ANCHORS
    model = AnchorSimilarity(floor=0.01).fit(anchors, [1] * 8 + [0] * 8)
    assert model.similarity("三星手机评测") > 0.5
    assert model.similarity("phone review") > 0.5
    assert model.similarity("足球比赛新闻") == 0.01
    assert model.similarity("pasta recipes") == 0.01
    batch = ["手机报价", "football scores", "华为手机"]
    assert model.similarities(batch).tolist() == [model.similarity(a) for a in batch]
    assert model.similarities([]).shape == (0,)


# --- topic model ----------------------------------------------------------------------------

def test_topic_model_with_every_part(corpus) -> None:
    model = TopicModel().fit(full_samples(corpus))
    assert model.sources_ == {"relevance": "page_nb", "target": "svm", "anchor": "anchor_nb"}
    assert model.relevance(corpus["test_rel"][0]) > 0.5 > model.relevance(corpus["test_irr"][0])
    assert model.is_target(detail_stats(random.Random(9)))
    assert not model.is_target(list_stats(random.Random(9)))
    sims = model.anchor_similarity(["手机评测", "足球新闻"])
    assert sims[0] > 0.5 and sims[1] == 0.01


def test_topic_model_without_result_samples_uses_the_rule(corpus) -> None:
    samples = full_samples(corpus)
    samples.target, samples.nontarget = [], []
    model = TopicModel().fit(samples)
    assert model.sources_["target"] == "rule"
    assert model.is_target(detail_stats(random.Random(1))) and not model.is_target(list_stats(random.Random(1)))


def test_topic_model_without_anchors_uses_the_page_classifier(corpus) -> None:
    samples = full_samples(corpus)
    samples.anchors = []
    model = TopicModel(anchor_floor=0.02).fit(samples)
    assert model.sources_["anchor"] == "relevance_model"
    sims = model.anchor_similarity(["智能手机屏幕", "football match"])
    assert sims[0] > 0.5 and sims[1] == 0.02


@pytest.mark.parametrize("page_classifier", ["nb", "kde-nb", "vsm"])
def test_topic_model_with_keywords_only_is_the_position_vsm(page_classifier: str) -> None:
    model = TopicModel(page_classifier=page_classifier).fit(
        TopicSamples(keywords=["智能手机", "mobile phone"]))
    assert model.sources_ == {"relevance": "vsm", "target": "rule", "anchor": "relevance_model"}
    assert model.relevance("这款智能手机很好") >= 0.5
    assert model.relevance("mobile phone deals") > model.relevance("a mobile network") > 0
    assert model.relevance("红烧肉的做法") == 0.0
    sims = model.anchor_similarity(["mobile phone deals", "recipes"]).tolist()
    assert sims[0] >= 0.5 and sims[1] == 0.01


def test_topic_model_with_anchors_only_judges_relevance_by_them() -> None:
    anchors = [(a, 1) for a in RELEVANT_ANCHORS] + [(a, 0) for a in IRRELEVANT_ANCHORS]
    model = TopicModel().fit(TopicSamples(anchors=anchors))
    assert model.sources_["relevance"] == "anchor_nb"
    assert model.relevance("最新手机评测和报价") > 0.5 > model.relevance("足球新闻和红烧肉做法")


def test_topic_model_with_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="nothing to judge relevance"):
        TopicModel().fit(TopicSamples())
    with pytest.raises(ValueError, match="nothing to judge relevance"):
        TopicModel().fit(TopicSamples(target=[PageStats(100)], nontarget=[PageStats(5)], keywords=["的"]))


def test_cross_validate_reports_accuracies(corpus) -> None:
    scores = TopicModel().cross_validate(full_samples(corpus), folds=4)
    assert set(scores) == {"relevance", "target", "anchor"}
    assert scores["relevance"] >= 0.9 and scores["target"] >= 0.9
    assert 0.0 <= scores["anchor"] <= 1.0


def test_cross_validate_gives_nan_for_missing_parts(corpus) -> None:
    samples = TopicSamples(relevant=corpus["train_rel"][:3], irrelevant=corpus["train_irr"][:1],
                           anchors=[("手机", 1), ("足球", 0), ("phone", 1), ("recipe", 0)])
    scores = TopicModel().cross_validate(samples)
    assert math.isnan(scores["relevance"]) and math.isnan(scores["target"])
    assert 0.0 <= scores["anchor"] <= 1.0
    with pytest.raises(ValueError, match="folds"):
        TopicModel().cross_validate(samples, folds=1)
