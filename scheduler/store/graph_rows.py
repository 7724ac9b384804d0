"""G_w's rows as the learner takes them (``LearningGraphRows``), from the store's cursors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jlse.scheduler.store.base import LearningGraphRows

STREAM_BATCH = 10_000  # rows per fetchmany while streaming a large result


def graph_rows(rows: Sequence[tuple]) -> LearningGraphRows:
    """Rows in ``LEARNING_GRAPH_SQL``'s columns as arrays."""
    columns = list(zip(*rows, strict=True)) or [()] * 6
    ids, parents, urls, anchors, contexts, results = columns
    return LearningGraphRows(
        ids=np.array(ids, dtype=np.int64), parent_ids=np.array(parents, dtype=np.int64),
        urls=list(urls), anchors=list(anchors), contexts=list(contexts),
        is_result=np.array(results, dtype=bool),
    )


def read_graph_rows(cur: Any) -> LearningGraphRows:
    """Columns of an executed ``LEARNING_GRAPH_SQL``, read ``STREAM_BATCH`` rows at a time."""
    ids: list[int] = []
    parents: list[int] = []
    urls: list[str] = []
    anchors: list[str] = []
    contexts: list[str] = []
    results: list[int] = []
    while batch := cur.fetchmany(STREAM_BATCH):
        columns = list(zip(*batch, strict=True))
        for column, values in zip((ids, parents, urls, anchors, contexts, results), columns,
                                  strict=True):
            column.extend(values)
    return LearningGraphRows(
        ids=np.array(ids, dtype=np.int64), parent_ids=np.array(parents, dtype=np.int64),
        urls=urls, anchors=anchors, contexts=contexts,
        is_result=np.array(results, dtype=bool),
    )
