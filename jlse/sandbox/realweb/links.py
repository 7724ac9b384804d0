"""Links that follow the text: every article links to the articles it most resembles (TF-IDF
cosine over the served documents), three on its own site and two on its partner sites.

Partners keep the sites from being fully interlinked: a topical site's partners are its
neighbours in its topic's chain (forum - digest - archive), one portal, and for the forum one
site of a related topic (computing - marketplace, politics - religion...); a portal's partners
are one topical site of each topic. Off-topic neighbours come in where the text says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from jlse.sandbox.realweb.corpus import TOPICS, Doc
from jlse.sandbox.realweb.plan import RELATED_TOPIC, RealSite, SitePlan

if TYPE_CHECKING:
    from scipy import sparse

K_OWN, K_CROSS = 3, 2
CHUNK_ROWS = 512  # rows of the similarity matrix computed at once

Neighbours = dict[int, tuple[tuple[int, ...], tuple[int, ...]]]  # doc -> (own site, other sites)


def partner_hosts(sites: list[RealSite]) -> dict[str, list[str]]:
    """host -> the hosts its articles' cross-site links may point to."""
    topical = {(site.topic, site.index): site.host for site in sites if site.kind == "topic"}
    portals = [site.host for site in sites if site.kind == "portal"]
    partners: dict[str, list[str]] = {}
    for site in sites:
        if site.kind == "topic":
            chain = [topical[site.topic, i] for i in (site.index - 1, site.index + 1)
                     if (site.topic, i) in topical]
            extra = [portals[site.index % len(portals)]]
            if site.index == 0:
                extra.append(topical[RELATED_TOPIC[site.topic], 0])
            partners[site.host] = chain + extra
        elif site.kind == "portal":
            partners[site.host] = [topical[topic, site.index] for topic in TOPICS]
    return partners


def tfidf(texts: list[str]) -> sparse.csr_matrix:
    """L2-normalised TF-IDF rows (sublinear tf, English stop words left out)."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # slow to import: on use only

    vectorizer = TfidfVectorizer(sublinear_tf=True, stop_words="english", min_df=2, max_df=0.5,
                                 token_pattern=r"(?u)\b[a-z][a-z]+\b", dtype=np.float32)
    return vectorizer.fit_transform(texts).tocsr()


def top_similar(matrix: sparse.csr_matrix, rows: np.ndarray, columns: np.ndarray, k: int,
         same: bool) -> list[list[int]]:
    """For each row, the positions in ``columns`` of its k most similar (similarity > 0; ties
    to the lower position), itself excluded when ``same``."""
    if len(columns) == 0 or k == 0:
        return [[] for _ in rows]
    target = matrix[columns].T.tocsc()
    result: list[list[int]] = []
    for start in range(0, len(rows), CHUNK_ROWS):
        chunk = rows[start:start + CHUNK_ROWS]
        sims = (matrix[chunk] @ target).toarray()
        if same:
            sims[np.arange(len(chunk)), np.arange(start, start + len(chunk))] = -1.0
        take = min(k, sims.shape[1])
        part = np.argpartition(-sims, take - 1, axis=1)[:, :take] if take < sims.shape[1] \
            else np.tile(np.arange(sims.shape[1]), (len(chunk), 1))
        for row, candidates in enumerate(part):
            ranked = sorted(candidates.tolist(), key=lambda col, r=row: (-sims[r, col], col))
            result.append([col for col in ranked if sims[row, col] > 0])
    return result


def neighbours(plans: list[SitePlan], docs: dict[int, Doc]) -> Neighbours:
    """Every article's own-site and cross-site neighbours (document ids, most similar first)."""
    ids = sorted(doc_id for plan in plans for doc_id in plan.section_of)
    if not ids:
        return {}
    matrix = tfidf([docs[doc_id].text for doc_id in ids])
    row_of = {doc_id: row for row, doc_id in enumerate(ids)}
    rows_of = {plan.host: np.array(sorted(row_of[d] for d in plan.section_of), dtype=np.int64)
               for plan in plans}
    partners = partner_hosts([plan.site for plan in plans])
    found: Neighbours = {}
    for plan in plans:
        own = rows_of[plan.host]
        if len(own) == 0:
            continue
        cross = np.concatenate([rows_of[host] for host in partners.get(plan.host, [])]
                               or [np.zeros(0, dtype=np.int64)])
        own_top = top_similar(matrix, own, own, K_OWN, same=True)
        cross_top = top_similar(matrix, own, cross, K_CROSS, same=False)
        for row, mine, theirs in zip(own, own_top, cross_top, strict=True):
            found[ids[row]] = (tuple(ids[own[c]] for c in mine),
                               tuple(ids[cross[c]] for c in theirs))
    return found
