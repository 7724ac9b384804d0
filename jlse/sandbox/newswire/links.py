"""Links that follow the text (TF-IDF cosine over the stories, ``jlse.sandbox.realweb.links``):
every article links to the three stories of its own site it most resembles ("more on this")
and mentions, in its text, the two most similar stories of its peer sites (never the story
itself); partner blocks link sites that share no text.

Peers keep the web from being fully interlinked and make some sites hard to reach directly:
a desk mentions two outlets, one corporate site, the first desk of a neighbouring topic and
two regional papers, never the other desk of its own topic; an outlet mentions every desk, one
corporate site, the next outlet and two papers; a corporate site two outlets, the next corporate site and a portal; a
regional paper an outlet, a desk, two other papers and a portal; a journal its topic's first
desk, a portal, a paper and a journal of a topic sharing its words; a topic blog its topic's
journals and a paper; a chatter blog two portals, a corporate site and a paper; a portal a
corporate site, the next portal, two journals and a paper. Nothing on-topic outside the
journals and blogs links a journal or a topic blog (``partner_blocks``: the tunnels).
"""

from __future__ import annotations

import numpy as np

from jlse.sandbox.newswire.corpus import Story
from jlse.sandbox.newswire.plan import SitePlan, WireSite
from jlse.sandbox.newswire.syndication import SHARED_VOCABULARY
from jlse.sandbox.realweb.links import tfidf, top_similar

K_OWN, K_MENTION = 3, 2
N_PAPERS = 2  # regional papers a desk's or an outlet's stories mention
SPARE = 4  # more candidates than mentions: copies of the story itself are left out
Neighbours = dict[tuple[str, int], tuple[tuple[int, ...], tuple[tuple[str, int], ...]]]
NEIGHBOUR_TOPIC = {"energy": "commodities", "commodities": "trade", "trade": "economy",
                   "economy": "money", "money": "economy", "metals": "commodities"}


def peer_hosts(sites: list[WireSite]) -> dict[str, list[str]]:
    """host -> the hosts its articles may mention."""
    of = {kind: [s.host for s in sites if s.kind == kind]
          for kind in ("outlet", "corporate", "regional", "journal", "portal")}
    outlets, corporate, regional = of["outlet"], of["corporate"], of["regional"]
    journals, portals = of["journal"], of["portal"]
    desks = [s for s in sites if s.kind == "desk"]
    first_desk = {s.topic: s.host for s in desks if s.index == 0}
    first_journal = {s.topic: s.host for s in sites if s.kind == "journal" and s.index == 0}
    peers: dict[str, list[str]] = {}
    for site in sites:
        n = site.index
        if site.kind == "desk":
            at = desks.index(site)
            peers[site.host] = [outlets[(n + i) % len(outlets)] for i in (0, 2)] + [
                corporate[n % len(corporate)], first_desk[NEIGHBOUR_TOPIC[site.topic]]] + [
                regional[(N_PAPERS * at + i) % len(regional)] for i in range(N_PAPERS)]
        elif site.kind == "outlet":
            peers[site.host] = [s.host for s in desks] + [
                corporate[n % len(corporate)], outlets[(n + 1) % len(outlets)]] + [
                regional[(N_PAPERS * (n + len(desks)) + i) % len(regional)]
                for i in range(N_PAPERS)]
        elif site.kind == "corporate":
            peers[site.host] = [outlets[n % len(outlets)], outlets[(n + 1) % len(outlets)],
                                corporate[(n + 1) % len(corporate)], portals[n % len(portals)]]
        elif site.kind == "regional":
            peers[site.host] = [outlets[n % len(outlets)], desks[n % len(desks)].host,
                                regional[(n + 1) % len(regional)],
                                regional[(n + 7) % len(regional)], portals[n % len(portals)]]
        elif site.kind == "journal":
            at = journals.index(site.host)
            peers[site.host] = [first_desk[site.topic], portals[at % len(portals)],
                                regional[3 * at % len(regional)],
                                first_journal[SHARED_VOCABULARY[site.topic][0]]]
        elif site.kind == "blog" and site.topic != "hub":
            peers[site.host] = [s.host for s in sites if s.kind == "journal"
                                and s.topic == site.topic] + [regional[5 * n % len(regional)]]
        elif site.kind == "blog":
            peers[site.host] = [portals[n % len(portals)], portals[(n + 3) % len(portals)],
                                corporate[n % len(corporate)], regional[2 * n % len(regional)]]
        elif site.kind == "portal":
            peers[site.host] = [corporate[n % len(corporate)], portals[(n + 1) % len(portals)],
                                journals[n % len(journals)],
                                journals[(n + 5) % len(journals)],
                                regional[4 * n % len(regional)]]
    return peers


def neighbours(plans: list[SitePlan], docs: dict[int, Story]) -> Neighbours:
    """(host, story) of every article -> its own-site stories and the (host, story) copies it
    mentions on peer sites (most similar first; never the same story)."""
    ids = sorted({doc_id for plan in plans for doc_id in plan.section_of})
    if not ids:
        return {}
    matrix = tfidf([docs[doc_id].text for doc_id in ids])  # one row per story, not per copy
    row_of = {doc_id: row for row, doc_id in enumerate(ids)}
    carried = {plan.host: sorted(plan.section_of) for plan in plans}
    peers = peer_hosts([plan.site for plan in plans])
    found: Neighbours = {}
    for plan in plans:
        mine = carried[plan.host]
        if not mine:
            continue
        own = np.array([row_of[d] for d in mine], dtype=np.int64)
        other = [(host, d) for host in peers.get(plan.host, []) for d in carried[host]]
        columns = np.array([row_of[d] for _, d in other], dtype=np.int64)
        own_top = top_similar(matrix, own, own, K_OWN, same=True)
        other_top = top_similar(matrix, own, columns, K_MENTION + SPARE, same=False)
        for doc_id, near, far in zip(mine, own_top, other_top, strict=True):
            mentions: list[tuple[str, int]] = []
            for column in far:
                host, other_id = other[column]
                if other_id != doc_id and all(other_id != d for _, d in mentions):
                    mentions.append((host, other_id))
            found[plan.host, doc_id] = (tuple(mine[c] for c in near),
                                        tuple(mentions[:K_MENTION]))
    return found


def partner_blocks(sites: list[WireSite]) -> dict[str, list[tuple[str, list[str], bool]]]:
    """host -> the partner blocks its pages carry: (heading, hosts, with their newest stories).

    These are the tunnels: journals are linked only from investor portals (off-topic) and
    blogs, topic blogs only from market-chatter blogs (mostly off-topic), chatter blogs only
    from portals, portals from regional papers and corporate sites."""
    of = {kind: [s for s in sites if s.kind == kind]
          for kind in ("corporate", "regional", "journal", "portal", "blog")}
    portals, journals = [s.host for s in of["portal"]], [s.host for s in of["journal"]]
    chatter = [s.host for s in of["blog"] if s.topic == "hub"]
    topical = [s.host for s in of["blog"] if s.topic != "hub"]
    blocks: dict[str, list[tuple[str, list[str], bool]]] = {}
    for n, site in enumerate(of["regional"]):
        blocks[site.host] = [("Markets data", [portals[n % len(portals)]], False)]
    for n, site in enumerate(of["corporate"]):
        blocks[site.host] = [("Investor portals", [portals[(2 * n + i) % len(portals)]
                                                   for i in (0, 1)], False)]
    for n, site in enumerate(of["portal"]):
        blocks[site.host] = [
            ("Sector news from our partners", [journals[n % len(journals)],
                                               journals[(n + 5) % len(journals)]], True),
            ("Reader blogs", [chatter[(n + i) % len(chatter)] for i in (0, 4, 8)], False)]
    for n, site in enumerate(of["journal"]):
        blocks[site.host] = [("Our partners", [portals[(n + i) % len(portals)]
                                               for i in (0, 4)], False)]
    for site in of["blog"]:
        if site.topic == "hub":
            roll = [topical[site.index % len(topical)], topical[(site.index + 2) % len(topical)],
                    journals[site.index % len(journals)], chatter[(site.index + 1) % len(chatter)]]
        else:
            roll = [s.host for s in of["journal"] if s.topic == site.topic] + [
                chatter[site.index % len(chatter)], chatter[(site.index + 6) % len(chatter)]]
        blocks[site.host] = [("Blogroll", roll, False)]
    return blocks
