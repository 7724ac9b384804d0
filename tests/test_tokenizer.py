"""The tokenizer's fast paths against its plain rules: the batch segmentation of Chinese runs
against the scan from the end (itself checked against jieba in test_models.py), the C-speed
ASCII words and the run cache against a direct reading of the module docstring."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jlse.models import tokenizer
from jlse.models.tokenizer import (
    BATCH_MIN_CHARS,
    STOPWORDS,
    _BucketTable,
    _segment_batch,
    _segment_run,
    tokenize,
    tokenize_many,
)

ZH_TEXT = ("华为发布新款旗舰智能手机，屏幕更大，电池续航更长，拍照效果出色。"
           "红烧肉的做法很简单，先把猪肉切块，再加酱油和糖慢慢炖。"
           "中国足球队在世界杯预选赛中以二比一战胜对手，球迷非常高兴。"
           "研究生命起源的科学家认为结婚的和尚未结婚的人都很好。")


def reference_tokens(text: str) -> list[str]:
    """The module docstring's rules, written plainly: one regex, a scan per Han run."""
    tokens = []
    for han, latin in re.findall(r"([\u4e00-\u9fd5]+)|([a-z0-9][a-z0-9'-]*)",
                                 tokenizer._normalise(text)):
        if han:
            tokens.extend(word for word in _segment_run(han) if word not in STOPWORDS)
            continue
        word = latin.rstrip("'-")
        if len(word) > 1 and word.strip("0123456789'-") and word not in STOPWORDS:
            tokens.append(word)
    return tokens


def random_runs(rng: random.Random, count: int) -> list[str]:
    """Han runs of dictionary words, of text clauses and of random characters (many not in
    the dictionary), from one character to a few hundred."""
    clauses = [run for run in re.findall(r"[\u4e00-\u9fd5]+", ZH_TEXT)]
    chars = list(ZH_TEXT.replace("，", "").replace("。", ""))
    runs = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.3:
            runs.append(rng.choice(clauses))
        elif kind < 0.7:
            runs.append("".join(rng.choice(chars) for _ in range(rng.randint(1, 60))))
        else:
            runs.append("".join(chr(rng.randint(0x4E00, 0x9FD5)) for _ in range(rng.randint(1, 40))))
    runs.append("".join(rng.choice(chars) for _ in range(400)))
    return runs


# Runs whose best routes tie exactly (the same counts summed in two orders): the longer first
# word wins, as in jieba.
TIED_RUNS = ["一一一", "丁丁丁", "万万万万万", "哈哈哈哈哈", "好好好学习"]


@pytest.fixture(scope="module")
def dictionary() -> tokenizer._HanDictionary:
    return tokenizer._dictionary()


def test_batch_segmentation_matches_the_scan_from_the_end(dictionary) -> None:
    runs = random_runs(random.Random(0), 600) + TIED_RUNS
    assert _segment_batch(runs, dictionary) == [_segment_run(run) for run in runs]
    assert _segment_batch(["一一一"], dictionary) == [("一一", "一")]
    assert _segment_batch(["手"], dictionary) == [_segment_run("手")]


def test_long_texts_are_segmented_in_one_batch_with_the_same_tokens(monkeypatch,
                                                                   dictionary) -> None:
    calls = []
    batch = tokenizer._segment_batch
    monkeypatch.setattr(tokenizer, "_segment_batch",
                        lambda runs, arrays: calls.append(len(runs)) or batch(runs, arrays))
    monkeypatch.setattr(tokenizer, "_RUN_WORDS", {})
    rng = random.Random(1)
    pieces = random_runs(rng, 80) + ["Samsung Galaxy", "5G", "e-mail", "2024", "，", " "]
    text = " ".join(rng.choice(pieces) for _ in range(200))
    assert len(text) > BATCH_MIN_CHARS
    assert tokenize(text) == reference_tokens(text)
    assert calls, "a long new Chinese text should take the batch segmentation"


def test_repeated_runs_come_from_the_cache_which_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(tokenizer, "_RUN_WORDS", {})
    monkeypatch.setattr(tokenizer, "_CACHED_RUNS", 3)
    runs = ["手机", "电池", "屏幕", "手机"]
    assert tokenizer._segment_runs(runs) == [_segment_run(run) for run in runs]
    assert set(tokenizer._RUN_WORDS) == {"手机", "电池", "屏幕"}
    tokenizer._RUN_WORDS["手机"] = ("cached",)
    assert tokenizer._segment_runs(["手机", "足球比赛"]) == [("cached",), _segment_run("足球比赛")]
    assert set(tokenizer._RUN_WORDS) == {"足球比赛"}  # it was full: forgotten at once


@settings(max_examples=1500, deadline=None)
@given(st.text(max_size=60)
       | st.text(alphabet=st.characters(max_codepoint=127), max_size=80)
       | st.lists(st.sampled_from(["the", "I", "x", "5g", "12", "12-05", "e-mail", "don't", "'a'",
                                   "--", "-ab-", "Phone", "ÀB", "naïve", "ﬁne", "ＡＢ", "2024x",
                                   "手机", "的", "\U0001d400", "’s", "ʼ", "\n"]),
                  max_size=25).map(" ".join))
def test_tokens_follow_the_plain_rules(text: str) -> None:
    assert tokenize(text) == reference_tokens(text)


TEXT_PIECES = ["the", "I", "x", "5g", "12", "12-05", "e-mail", "don't", "'a'", "--", "-ab-", "Phone",
               "ÀB", "naïve", "手机", "的", "’s", "\n", "\x00", "Battery", "life", "2024x", ","]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(max_codepoint=127), max_size=60)
                | st.lists(st.sampled_from(TEXT_PIECES), max_size=12).map(" ".join)
                | st.text(max_size=20) | st.none(), max_size=12))
def test_tokenize_many_is_tokenize_of_each_text(texts: list) -> None:
    assert tokenize_many(texts) == [tokenize(text) for text in texts]


def test_tokenize_many_takes_the_fast_path_for_ascii_texts_only(monkeypatch) -> None:
    one_by_one = []
    monkeypatch.setattr(tokenizer, "tokenize", lambda text: one_by_one.append(text) or [])
    texts = ["Plain ASCII text", "e-mail don't 12-05 5G", "naïve café", None, "NUL \x00 inside"]
    tokenize_many(texts[:2])
    assert one_by_one == []
    tokenize_many(texts)
    assert one_by_one == texts, "a text holds NUL: no batch, each text on its own"


def test_letters_without_a_lower_case_are_no_letters() -> None:
    # NFKD turns U+1D400 into "A" after lower-casing: upper case, so not a word character
    assert tokenize("0\U0001d400") == reference_tokens("0\U0001d400") == []
    assert tokenize("PHONE Phone phone") == ["phone"] * 3


def test_the_bucket_table_finds_every_key_and_nothing_else() -> None:
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, 1 << 34, 100_000))
    keys = np.concatenate(([0], keys[keys > 0]))
    values = rng.permutation(len(keys))
    table = _BucketTable(keys, values)
    assert table.overflow, "this many keys overfill some buckets"
    assert np.array_equal(table.get(keys), values)
    absent = np.setdiff1d(rng.integers(0, 1 << 34, 10_000), keys)
    assert (table.get(absent) == -1).all()
    assert table.get(np.zeros(0, dtype=np.int64)).shape == (0,)
    assert (_BucketTable(keys[1:], values[1:]).get(np.array([0])) == -1).all()


def test_until_the_dictionary_is_built_in_the_background_runs_go_one_by_one(monkeypatch) -> None:
    started, real_thread = [], threading.Thread
    monkeypatch.setattr(tokenizer, "_dictionary_built", [])
    monkeypatch.setattr(tokenizer, "_build_started", threading.Event())
    monkeypatch.setattr(tokenizer, "_RUN_WORDS", {})
    monkeypatch.setattr(tokenizer.threading, "Thread",
                        lambda target, **kwargs: started.append(target) or real_thread())
    runs = random_runs(random.Random(2), 100)
    assert tokenizer._segment_runs(runs) == [_segment_run(run) for run in runs]
    assert tokenizer._segment_runs(runs[:-1] + ["手机" * 500]) is not None
    assert started == [tokenizer._dictionary], "one background build, started once"


def test_prepare_builds_the_dictionary_for_han_text_only(monkeypatch) -> None:
    built = []
    monkeypatch.setattr(tokenizer, "_dictionary_built", [])
    monkeypatch.setattr(tokenizer, "_dictionary", lambda: built.append(1))
    tokenizer.prepare(["only English", None, b"bytes"])  # type: ignore[list-item]
    assert built == []
    tokenizer.prepare(["English", "手机评测"])
    assert built == [1]


@pytest.mark.parametrize("text", ["\ud800手机" * 200, "手" * 1000, "a" * 5000, ""])
def test_odd_long_texts_never_raise(text: str) -> None:
    assert tokenize(text) == reference_tokens(text)


def test_jieba_keeps_its_dictionary_cache_in_the_user_cache_folder(tmp_path) -> None:
    """Not in $TMPDIR, where anyone can write a jieba.cache that jieba would read back."""
    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, JLSE_CACHE_DIR=str(cache), TMPDIR=str(tmp))
    code = "from jlse.models.tokenizer import tokenize; print(tokenize('价格评测手机'))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert (cache / "jieba.cache").stat().st_size > 1_000_000
    assert not list(tmp.iterdir())
