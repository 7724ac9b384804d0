"""Realistic-ish text from the word lists: item names, sentences and paragraphs.

Every function draws from the ``random.Random`` it is given, so a page's text is a pure
function of its seed.
"""

from __future__ import annotations

import random
import re

from jlse.sandbox.vocab import Language, TopicWords

_SLOT = re.compile(r"\{([tnaopb])\}")


def item_name(language: Language, topic: TopicWords, rng: random.Random) -> str:
    """A product / dish / team / fund name such as "Zenith Pro 12" or "华为Mate60"."""
    name = language.joiner.join((rng.choice(topic.name_a), rng.choice(topic.name_b)))
    if topic.numbered:
        name += f"{language.joiner}{rng.randint(2, 99)}"
    return name


class TextGen:
    """Sentences about one topic in one language; ``mix`` blends in a second topic's terms."""

    def __init__(
        self,
        language: Language,
        topic: TopicWords,
        rng: random.Random,
        accents: bool = False,
        mix: TopicWords | None = None,
        mix_ratio: float = 0.0,
    ) -> None:
        self.language = language
        self.topic = topic
        self.rng = rng
        self.accents = accents and bool(language.accent_templates)
        self.mix = mix
        self.mix_ratio = mix_ratio

    def term(self) -> str:
        if self.mix is not None and self.rng.random() < self.mix_ratio:
            return self.rng.choice(self.mix.terms)
        return self.rng.choice(self.topic.terms)

    def _fill(self, slot: str, name: str) -> str:
        rng = self.rng
        if slot == "t":
            return self.term()
        if slot == "a":
            return rng.choice(self.language.adjectives)
        if slot == "o":
            return rng.choice(self.language.overlap)
        if slot == "p":
            return rng.choice(self.language.people)
        if slot == "b":
            return rng.choice(self.topic.name_a)
        return name or item_name(self.language, self.topic, rng)

    def sentence(self, name: str = "") -> str:
        """One sentence; ``name`` is the item the sentence may mention."""
        templates = self.language.templates
        if self.accents and self.rng.random() < 0.25:
            templates = self.language.accent_templates
        text = _SLOT.sub(lambda m: self._fill(m.group(1), name), self.rng.choice(templates))
        return text[:1].upper() + text[1:]

    def paragraph(self, n_sentences: int, name: str = "") -> str:
        sep = " " if self.language.code == "en" else ""
        return sep.join(self.sentence(name) for _ in range(n_sentences))

    def paragraphs(self, count: int, low: int, high: int, name: str = "") -> list[str]:
        """``count`` paragraphs of ``low``..``high`` sentences each (long contiguous blocks)."""
        return [self.paragraph(self.rng.randint(low, high), name) for _ in range(count)]

    def phrase(self) -> str:
        """A short adjective + term phrase for snippets and descriptions."""
        sep = " " if self.language.code == "en" else "的"
        return f"{self.rng.choice(self.language.adjectives)}{sep}{self.term()}"
