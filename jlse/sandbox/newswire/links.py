"""Links that follow the text (TF-IDF cosine, ``jlse.sandbox.realweb.links``): every article
links to the three stories of its own site it most resembles ("more on this") and mentions, in
its text, the two most similar stories of its peer sites.

Peers keep the web from being fully interlinked and make a topic's second desk hard to reach
directly: a desk mentions two outlets, one corporate site and the first desk of a neighbouring
topic, never the other desk of its own topic; an outlet mentions every desk, one corporate site
and the next outlet; a corporate site mentions two outlets and the next corporate site.
"""

from __future__ import annotations

import numpy as np

from jlse.sandbox.newswire.corpus import Story
from jlse.sandbox.newswire.plan import SitePlan, WireSite
from jlse.sandbox.realweb.links import Neighbours, tfidf, top_similar

K_OWN, K_MENTION = 3, 2
NEIGHBOUR_TOPIC = {"energy": "commodities", "commodities": "trade", "trade": "economy",
                   "economy": "money", "money": "economy", "metals": "commodities"}


def peer_hosts(sites: list[WireSite]) -> dict[str, list[str]]:
    """host -> the hosts its articles may mention."""
    outlets = [s.host for s in sites if s.kind == "outlet"]
    corporate = [s.host for s in sites if s.kind == "corporate"]
    desks = [s for s in sites if s.kind == "desk"]
    first_desk = {s.topic: s.host for s in desks if s.index == 0}
    peers: dict[str, list[str]] = {}
    for site in sites:
        n = site.index
        if site.kind == "desk":
            peers[site.host] = [outlets[(n + i) % len(outlets)] for i in (0, 2)] + [
                corporate[n % len(corporate)], first_desk[NEIGHBOUR_TOPIC[site.topic]]]
        elif site.kind == "outlet":
            peers[site.host] = [s.host for s in desks] + [
                corporate[n % len(corporate)], outlets[(n + 1) % len(outlets)]]
        elif site.kind == "corporate":
            peers[site.host] = [outlets[n % len(outlets)], outlets[(n + 1) % len(outlets)],
                                corporate[(n + 1) % len(corporate)]]
    return peers


def neighbours(plans: list[SitePlan], docs: dict[int, Story]) -> Neighbours:
    """Every article's own-site and mentioned stories (ids, most similar first)."""
    ids = sorted(doc_id for plan in plans for doc_id in plan.section_of)
    if not ids:
        return {}
    matrix = tfidf([docs[doc_id].text for doc_id in ids])
    row_of = {doc_id: row for row, doc_id in enumerate(ids)}
    rows_of = {plan.host: np.array(sorted(row_of[d] for d in plan.section_of), dtype=np.int64)
               for plan in plans}
    peers = peer_hosts([plan.site for plan in plans])
    found: Neighbours = {}
    for plan in plans:
        own = rows_of[plan.host]
        if len(own) == 0:
            continue
        other = np.concatenate([rows_of[host] for host in peers.get(plan.host, [])]
                               or [np.zeros(0, dtype=np.int64)])
        own_top = top_similar(matrix, own, own, K_OWN, same=True)
        other_top = top_similar(matrix, own, other, K_MENTION, same=False)
        for row, mine, theirs in zip(own, own_top, other_top, strict=True):
            found[ids[row]] = (tuple(ids[own[c]] for c in mine),
                               tuple(ids[other[c]] for c in theirs))
    return found
