"""The compiled posterior of :meth:`models.kde_nb.KDENaiveBayes.predict_proba_tokens`
(imports numba: load it through :mod:`models.compiled`).

Text by text, the steps of the numpy path (``TfidfFeatures.entries``, ``KDENaiveBayes._likelihood``
and the temperature); tests/test_kde_vsm.py compares the two.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@numba.njit(cache=True, nogil=True)
def posteriors(columns, lengths, idf, indptr0, values0, indptr1, values1, sigma, n_samples,
               zero_log_density, zero_log_likelihood, prior_log_odds, evidence_features):
    """P(relevant) of each text, given its tokens' feature columns (-1: not a feature) and the
    number of tokens of each text; ``evidence_features`` <= 0: untempered."""
    n_features = len(idf)
    counts = np.zeros(n_features, dtype=np.int64)
    terms = np.empty(n_features, dtype=np.int64)
    out = np.empty(len(lengths))
    start = 0
    for text in range(len(lengths)):
        n_distinct = 0
        for i in range(start, start + lengths[text]):
            column = columns[i]
            if column >= 0:
                if counts[column] == 0:
                    terms[n_distinct] = column
                    n_distinct += 1
                counts[column] += 1
        start += lengths[text]
        norm = 0.0
        for t in range(n_distinct):
            weight = counts[terms[t]] * idf[terms[t]]
            norm += weight * weight
        norm = math.sqrt(norm)
        log_odds = prior_log_odds + zero_log_likelihood[1] - zero_log_likelihood[0]
        n_terms = 0
        for t in range(n_distinct):
            j = terms[t]
            x = counts[j] * idf[j] / norm if norm > 0 else 0.0
            counts[j] = 0
            if x == 0:  # a term found in every training text weighs 0
                continue
            n_terms += 1
            log_odds += (_log_density(x, j, indptr1, values1, sigma[1], n_samples[1])
                         - zero_log_density[1, j])
            log_odds -= (_log_density(x, j, indptr0, values0, sigma[0], n_samples[0])
                         - zero_log_density[0, j])
        if evidence_features > 0:
            log_odds /= max(1.0, n_terms / evidence_features)
        out[text] = 1.0 / (1.0 + math.exp(-log_odds))  # exp overflows to inf: 0
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _log_density(x, j, indptr, values, sigma, n_samples):
    """log P(x_j = x | c): the column's zero training values as one weighted kernel, its
    non-zero ones each (``KDENaiveBayes._log_density``)."""
    zeros = n_samples - (indptr[j + 1] - indptr[j])
    zero_term = (math.log(zeros) if zeros > 0 else -np.inf) - 0.5 * (x / sigma) ** 2
    peak = zero_term
    for p in range(indptr[j], indptr[j + 1]):
        z = (x - values[p]) / sigma
        peak = max(peak, -0.5 * z * z)
    total = math.exp(zero_term - peak)
    for p in range(indptr[j], indptr[j + 1]):
        z = (x - values[p]) / sigma
        total += math.exp(-0.5 * z * z - peak)
    return peak + math.log(total) - math.log(n_samples) - math.log(sigma) - _LOG_SQRT_2PI
