"""The word lists of the sandbox web as typed records, one ``Language`` per script."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from jlse.sandbox import vocab_en, vocab_hant, vocab_zh

CRAWL_TOPICS = ("phones", "cameras", "laptops")
DISTRACTOR_TOPICS = ("cooking", "football", "travel", "finance")
NEWS = "news"  # the vocabulary of hub (portal/directory/news) sites


@dataclass(frozen=True)
class TopicWords:
    """What one topic talks about in one language."""

    label: str
    terms: tuple[str, ...]
    categories: tuple[tuple[str, str], ...]  # (url slug, display label)
    name_a: tuple[str, ...]  # first part of item names (brand, place, flavour...)
    name_b: tuple[str, ...]  # second part (series, dish, team...)
    numbered: bool  # item names end with a model number
    keywords: tuple[str, ...]


@dataclass(frozen=True)
class Language:
    """Shared words, sentence templates and UI strings of one language/script."""

    code: str  # "en", "zh" (simplified) or "zh-Hant"
    joiner: str  # between the parts of an item name
    adjectives: tuple[str, ...]
    overlap: tuple[str, ...]  # terms every topic uses (price, review, battery, ...)
    people: tuple[str, ...]
    templates: tuple[str, ...]
    accent_templates: tuple[str, ...]
    ui: dict[str, str]
    topics: dict[str, TopicWords]

    @property
    def lang(self) -> str:
        """The language of the truth records ("en" or "zh")."""
        return "en" if self.code == "en" else "zh"


def words(text: str) -> tuple[str, ...]:
    """Split a word list: on commas when it has any, else on whitespace."""
    if "," in text:
        return tuple(" ".join(part.split()) for part in text.split(",") if part.strip())
    return tuple(text.split())


def _categories(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in words(text) if text else ():
        slug, _, label = item.partition(":")
        pairs.append((slug.strip(), label.strip()))
    return tuple(pairs)


def _topic(raw: dict) -> TopicWords:
    return TopicWords(
        label=raw["label"],
        terms=words(raw["terms"]),
        categories=_categories(raw["categories"]),
        name_a=words(raw["name_a"]),
        name_b=words(raw["name_b"]),
        numbered=raw["numbered"],
        keywords=words(raw["keywords"]),
    )


def _language(code: str, module: ModuleType, joiner: str) -> Language:
    return Language(
        code=code,
        joiner=joiner,
        adjectives=words(module.ADJECTIVES),
        overlap=words(module.OVERLAP),
        people=words(module.PEOPLE),
        templates=module.TEMPLATES,
        accent_templates=getattr(module, "ACCENT_TEMPLATES", ()),
        ui=module.UI,
        topics={name: _topic(raw) for name, raw in module.TOPICS.items()},
    )


LANGUAGES: dict[str, Language] = {
    "en": _language("en", vocab_en, " "),
    "zh": _language("zh", vocab_zh, ""),
    "zh-Hant": _language("zh-Hant", vocab_hant, ""),
}
