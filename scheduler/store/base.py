"""The crawl database contract: what every backend (SQLite, PostgreSQL) offers the crawler."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from jlse.records import FetchRecord, LinkStatus, NewLink, Outcome, StoredLink
from jlse.redact import redact_url  # noqa: F401  (re-exported: the stores show URLs with it)


class StoreError(RuntimeError):
    """The crawl database failed: unreachable, corrupt, wrong schema, or a refused write."""


@dataclass
class CrawlStats:
    """Counts over the whole crawl database."""

    links: int = 0
    queued: int = 0
    fetched: int = 0
    rejected: int = 0
    relevant: int = 0  # fetched pages with relevance >= the threshold
    targets: int = 0  # rows of the ResultTable
    outcomes: dict[str, int] = field(default_factory=dict)  # crawl-history rows per outcome
    harvest_rate: float = 0.0  # relevant / fetched, 0 when nothing was fetched

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LearningGraphRows:
    """The links on result->seed paths (the vertices of G_w), as columns in no set order."""

    ids: np.ndarray  # int64 link ids, each once
    parent_ids: np.ndarray  # int64, -1 for a seed
    urls: list[str]
    anchors: list[str]
    contexts: list[str]
    is_result: np.ndarray  # bool: the link has a ResultTable row

    def __len__(self) -> int:
        return len(self.ids)


class CrawlStore(ABC):
    """LinkTable, ResultTable, crawl history and settings of one crawl.

    Every method is one transaction; every database failure is raised as ``StoreError``.
    Methods may be called from several threads.
    """

    @abstractmethod
    def add_links(self, links: Sequence[NewLink]) -> list[tuple[int, bool]]:
        """Insert the URLs not yet known; ``(id, created)`` per input, in input order.

        A known URL keeps its row; while it is still queued its priority becomes the max of
        the old and the new one. In a batch the first occurrence of a URL wins (priority max)
        and only that occurrence can report ``created``.
        """

    @abstractmethod
    def record_fetch(self, record: FetchRecord) -> None:
        """Store one fetch: history row, link marked fetched, ResultTable row if a target."""

    def record_fetch_once(self, record: FetchRecord) -> bool:
        """``record_fetch`` for a link that is still queued; False (only the history row
        added) if another worker wrote the page meanwhile, so the caller must not count it
        again. A backend that one process owns (SQLite) never sees that: this default writes
        and returns True."""
        self.record_fetch(record)
        return True

    def write_pages(self, fetches: Sequence[FetchRecord],
                    rejects: Sequence[tuple[int, Outcome, str]] = ()) -> list[bool]:
        """The pages of a batch: ``record_fetch_once`` of each fetch, then ``reject`` of each
        (url id, outcome, reason); per fetch, whether it was written. PostgreSQL writes them
        in one transaction (all or none); this default, one by one."""
        written = [self.record_fetch_once(record) for record in fetches]
        for url_id, outcome, reason in rejects:
            self.reject(url_id, outcome, reason)
        return written

    @contextmanager
    def autocommit(self) -> Iterator[None]:
        """Within: the calls that are safe as single statements (``get_link``, ``add_links``,
        ``record_fetch_once``) skip BEGIN/COMMIT round trips where the backend has them."""
        yield

    @abstractmethod
    def reject(self, url_id: int, outcome: Outcome, reason: str) -> None:
        """Mark a link rejected without fetching it, with a history row saying why."""

    @abstractmethod
    def requeue(self, url_id: int) -> None:
        """Put a link back in the queued state (to be tried again later)."""

    @abstractmethod
    def get_link(self, url_id: int) -> StoredLink | None: ...

    @abstractmethod
    def get_link_id(self, url: str) -> int | None: ...

    @abstractmethod
    def iter_links(self, status: LinkStatus | None = None, batch: int = 5000) -> Iterator[StoredLink]:
        """Links ordered by id, read ``batch`` rows at a time (never all at once)."""

    @abstractmethod
    def queued_links_of_host(self, host: str, limit: int) -> list[StoredLink]:
        """Up to ``limit`` queued links of ``host``, highest priority first (a frontier's
        refill of URLs it spilled)."""

    @abstractmethod
    def defer_pushes(self, shard: int, url_ids: Sequence[int]) -> None:
        """Remember links a frontier shard could not take (its Redis was down): the shard's
        next refill queues them (``deferred_pushes``)."""

    @abstractmethod
    def deferred_pushes(self, shard: int, limit: int) -> list[StoredLink]:
        """Up to ``limit`` links deferred for ``shard`` (whatever their status now)."""

    @abstractmethod
    def clear_deferred(self, url_ids: Sequence[int]) -> None:
        """Forget deferred links (pushed now, or no longer queued)."""

    @abstractmethod
    def count_deferred(self) -> int:
        """How many links wait deferred, over every shard."""

    @abstractmethod
    def iter_urls(self) -> Iterator[str]:
        """Every URL of the LinkTable, read in batches."""

    @abstractmethod
    def host_fetch_counts(self) -> dict[str, int]:
        """Number of fetched links per host."""

    def has_links(self) -> bool:
        """Whether the LinkTable holds any link (a crawl was started here)."""
        return self.stats().links > 0

    @abstractmethod
    def stats(self, relevance_threshold: float = 0.5) -> CrawlStats: ...

    @abstractmethod
    def result_count(self) -> int:
        """Rows of the ResultTable (target pages)."""

    @abstractmethod
    def learning_graph(self, dead_ends: bool = False) -> LearningGraphRows:
        """G_w's vertices: every ResultTable link and its ancestors up to a seed (docs/algorithms.md §1.6).

        With ``dead_ends``, also every other fetched link (the negative evidence of the default
        JLSE: on no path to a result, those vertices learn Q = 0).
        Each link appears once even when many results share it; a parent cycle (a corrupt
        database) ends instead of looping. Rows are streamed, not read all at once.
        """

    def learning_graph_batches(self, consume: Callable[[LearningGraphRows], None],
                               dead_ends: bool = False, batch_rows: int | None = None) -> int:
        """:meth:`learning_graph`'s rows handed to ``consume`` in batches of ``batch_rows``, as
        they are read: the caller never holds them all (a learner's restart at 1e8 vertices).
        The number of rows. After a dropped connection the read starts again: ``consume`` may
        see rows twice. This default reads them in one batch."""
        rows = self.learning_graph(dead_ends)
        consume(rows)
        return len(rows)

    @abstractmethod
    def fetch_watermark(self) -> int:
        """The newest crawl-history (fetch) id, 0 when nothing was fetched: where an
        incremental reader of :meth:`learning_rows_since` starts after a full read."""

    @abstractmethod
    def learning_rows_since(self, after: int, dead_ends: bool = False,
                            ) -> tuple[LearningGraphRows, int]:
        """The links fetched after crawl-history id ``after`` that are vertices of G_w (results;
        with ``dead_ends`` every fetched link), and the newest history id read up to. A link
        fetched twice may come twice; its ancestors are not included (``learning_rows_by_id``)."""

    @abstractmethod
    def learning_rows_by_id(self, link_ids: Sequence[int]) -> LearningGraphRows:
        """The links ``link_ids`` (those that exist) in :meth:`learning_graph`'s columns."""

    @abstractmethod
    def export_rows(
        self, min_relevance: float | None = 0.5, targets_only: bool = False
    ) -> Iterator[dict]:
        """Fetched pages as dicts (url, title, relevance, is_target, depth, fetched_at,
        status_code, content_type, parent_url).

        ``targets_only``: the target pages only (``min_relevance`` is then ignored);
        otherwise pages with relevance >= ``min_relevance``, or every fetched page if it is None.
        """

    @abstractmethod
    def set_meta(self, key: str, value: str) -> None: ...

    @abstractmethod
    def get_meta(self, key: str) -> str | None: ...

    @abstractmethod
    def close(self) -> None:
        """Release the connection; later calls raise ``StoreError``. Safe to call twice."""

    def __enter__(self) -> CrawlStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
