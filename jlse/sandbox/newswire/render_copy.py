"""How a syndicating site rewrites a wire story it carries: the headline (kept, trimmed, given a
kicker or rewritten from the lead), the paragraphs (a regional paper or portal may cut the lead
paragraph or trim the story; a blog quotes a few lines and comments) and the site's own
boilerplate. The same site and story give the same copy. Nothing here writes HTML.
"""

from __future__ import annotations

import random

from jlse.sandbox.newswire.corpus import TITLE_WORDS, Story, headline
from jlse.sandbox.newswire.plan import ORIGINAL_KINDS, TOPIC_NAMES, SitePlan
from jlse.sandbox.realweb.render import paragraph_texts

CUT_LEAD = {"regional": 0.4, "portal": 0.5}  # chance that the lead paragraph is cut
TRIM = {"regional": 0.5}  # chance that only the first paragraphs are kept
TRIMMED_PARAGRAPHS = 3
QUOTE_WORDS = (30, 60)
BLOG_INTROS = ("Spotted this on the wire this morning.", "Worth reading if you follow the markets.",
               "Here is one I did not expect.", "A reader sent me this one.",
               "File this under things to watch.", "The story everyone is talking about today.")
BLOG_COMMENTS = ("My take: the market has not priced this in yet.",
                 "Hard to say what it means for the next quarter, but I am watching it.",
                 "I have been saying this for months.",
                 "Not much of a surprise to anyone who reads the numbers.",
                 "We will know more when the next figures come out.",
                 "Tell me what you think in the comments.", "As always, none of this is advice.")
BLOG_PREFIXES = ("Worth a read", "On the wire", "Noted", "Today's story", "Quick take")
BOILERPLATE = {
    "regional": ("This story was distributed by the wire service and edited by the business "
                 "desk of {name}.", "Copyright 1987 {name}. Subscribe to the print edition for "
                 "local business news every morning."),
    "journal": ("{name} subscribers receive full coverage of {topic} every week.",
                "Reproduced under licence from the wire."),
    "portal": ("This report is provided for information only and is not investment advice.",
               "Market data and company news from {name}, updated through the trading day."),
}


def _rng(plan: SitePlan, doc: Story, what: str) -> random.Random:
    return random.Random(f"{plan.host}|{what}|{doc.id}")


def is_copy(plan: SitePlan) -> bool:
    return plan.site.kind not in ORIGINAL_KINDS


def title_on(plan: SitePlan, doc: Story) -> str:
    """The headline ``plan``'s site gives ``doc``."""
    if not is_copy(plan):
        return doc.title
    rng, words = _rng(plan, doc, "title"), doc.text.split()
    if plan.site.kind == "blog":
        return f"{rng.choice(BLOG_PREFIXES)}: {doc.title}"
    form = rng.randrange(4)
    if form == 1:
        return headline(words[:TITLE_WORDS - 2])
    if form == 2:
        return f"{plan.sections[plan.section_of[doc.id]].label}: {doc.title}"
    if form == 3 and len(words) > 2 * TITLE_WORDS:
        return headline(words[TITLE_WORDS:2 * TITLE_WORDS + 1])
    return doc.title


def _boilerplate(plan: SitePlan) -> list[str]:
    topic = TOPIC_NAMES.get(plan.site.topic, "business news").lower()
    return [line.format(name=plan.site.name, topic=topic)
            for line in BOILERPLATE.get(plan.site.kind, ())]


def copy_paragraphs(plan: SitePlan, doc: Story) -> tuple[list[str], list[str]]:
    """(the story's paragraphs as the site runs them, the site's lines after it)."""
    rng, kind = _rng(plan, doc, "body"), plan.site.kind
    texts = paragraph_texts(doc.text, doc.id)
    if kind == "blog":
        start = len(texts[0].split()) if len(texts) > 1 and rng.random() < 0.3 else 0
        quote = doc.text.split()[start:start + rng.randint(*QUOTE_WORDS)]
        return ([rng.choice(BLOG_INTROS), f"\u201c{' '.join(quote)} ...\u201d"],
                rng.sample(BLOG_COMMENTS, 2))
    if len(texts) > 1 and rng.random() < CUT_LEAD.get(kind, 0.0):
        texts = texts[1:]
    if rng.random() < TRIM.get(kind, 0.0):
        texts = texts[:TRIMMED_PARAGRAPHS]
    if kind == "regional":
        texts[0] = f"{plan.site.name.removeprefix('The ').upper()} - {texts[0]}"
    return texts, _boilerplate(plan)
