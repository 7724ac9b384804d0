"""The compiled link search of :mod:`models.link_search` (imports numba: import it lazily).

One loop per query link, in the steps and the float arithmetic of
:func:`models.link_search.search_arrays`, which tests compare it with.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def search_links(q_indptr, q_columns, q_values, p_indptr, p_vertices, p_weights,
                 a_indptr, a_terms, a_weights, u_indptr, u_terms, u_weights,
                 c_indptr, c_terms, c_weights, offsets, n_vertices, n_columns, k, ratio):
    n_links = len(q_indptr) - 1
    score = np.zeros(n_vertices, dtype=np.float32)  # one link's capped scores; 0: not reached
    vertices = np.empty(n_vertices, dtype=np.int32)  # the vertices it reaches, then candidates
    near_scores = np.empty(n_vertices, dtype=np.float32)
    query = np.zeros(n_columns, dtype=np.float32)  # the link's query values by stacked column
    ranks = np.empty(k, dtype=np.float32)
    best = np.full(n_links, -1, dtype=np.int64)
    best_score = np.zeros(n_links, dtype=np.float64)
    for link in range(n_links):
        n_reached = 0
        top = np.float32(0.0)
        for j in range(q_indptr[link], q_indptr[link + 1]):
            value = q_values[j]
            query[q_columns[j]] = value
            for p in range(p_indptr[q_columns[j]], p_indptr[q_columns[j] + 1]):
                product = value * p_weights[p]
                if product > 0:  # as the sparse product, which keeps no zero sum
                    v = p_vertices[p]
                    if score[v] == 0:
                        vertices[n_reached] = v
                        n_reached += 1
                    score[v] += product
                    top = max(top, score[v])
        n_near = _near(score, vertices, near_scores, n_reached, ranks, k, ratio * top)
        for i in range(n_near):
            v = vertices[i]
            s = near_scores[i]
            chosen = s >= top if k == 1 else np.float32(1.0) - s <= ranks[k - 1]
            if not chosen:
                continue
            total = 0.0  # field by field, as pair_products sums them
            total += _field_score(query, offsets[0], a_indptr, a_terms, a_weights, v)
            total += _field_score(query, offsets[1], u_indptr, u_terms, u_weights, v)
            total += _field_score(query, offsets[2], c_indptr, c_terms, c_weights, v)
            if total > best_score[link] or (total == best_score[link] and total > 0
                                            and v < best[link]):
                best_score[link] = total
                best[link] = v
        for j in range(q_indptr[link], q_indptr[link + 1]):
            query[q_columns[j]] = 0.0
    return best, best_score


@numba.njit(cache=True, nogil=True, inline="always")
def _near(score, vertices, near_scores, n_reached, ranks, k, limit):
    """In one pass over the ``n_reached`` vertices a link reached: moves those scoring at least
    ``limit`` to the front of ``vertices`` (their scores to ``near_scores``), keeps the k
    smallest ranks ``1 - score`` among them in ``ranks`` (repeats counted; inf where fewer),
    and clears ``score`` for the next link. Returns their number."""
    ranks[:] = np.inf
    n_near = 0
    for i in range(n_reached):
        v = vertices[i]
        s = score[v]
        score[v] = 0.0
        if s < limit:
            continue
        vertices[n_near] = v
        near_scores[n_near] = s
        n_near += 1
        rank = np.float32(1.0) - s
        if rank < ranks[k - 1]:
            at = k - 1
            while at > 0 and ranks[at - 1] > rank:
                ranks[at] = ranks[at - 1]
                at -= 1
            ranks[at] = rank
    return n_near


@numba.njit(cache=True, nogil=True, inline="always")
def _field_score(query, offset, indptr, terms, weights, v):
    """The vertex's postings in one field against the query, float32 products summed in
    float64."""
    total = 0.0
    for p in range(indptr[v], indptr[v + 1]):
        total += np.float64(query[offset + terms[p]] * weights[p])
    return total
