"""How PostgreSQL's ``links`` is split into partitions (schema 3), and the SQL that follows.

``links`` is ``PARTITION BY LIST (part)``, ``part = url_fp & (P - 1)``, one partition per value.
A new id is ``nextval * P + part``: the partition is in both of a row's keys, so
``PRIMARY KEY (id, part)`` and ``UNIQUE (url_fp, part)`` (each must hold the partition key)
still make ``id`` and ``url_fp`` unique over the whole table, and every lookup by id or by
fingerprint names its one partition (``part = key & (P - 1)``). Opt-in: a new database gets
partitions only when ``JLSE_LINK_PARTITIONS`` asks for them (``requested_partitions``).

Queries shared with the unpartitioned layouts (schema 2, SQLite) mark what only a partitioned
table needs with ``[[...]]``: kept there, dropped elsewhere. ``{mask}`` is ``P - 1``,
``{parts}`` is ``P``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# Partitions are opt-in: a new database is unpartitioned (schema 2, the faster link inserts)
# unless PARTITIONS_ENV asks for a power of two; 1e9 links make 16 partitions of ~6e7 rows,
# ~30 GB each (docs/distributed.md). Each database keeps the count it was made with (meta).
PARTITIONS_ENV = "JLSE_LINK_PARTITIONS"
LINK_PARTITIONS = 16  # the count the docs suggest for ~1e9 links
MAX_LINK_PARTITIONS = 256
PARTITIONS_META_KEY = "link_partitions"
_SEGMENT = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)


@dataclass(frozen=True)
class LinkLayout:
    """``partitions`` 1: one unpartitioned ``links`` without a ``part`` column."""

    partitions: int = 1
    _cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        count = self.partitions
        if count < 1 or count & (count - 1):
            raise ValueError(f"link partitions must be a power of two, not {count}")

    @property
    def partitioned(self) -> bool:
        return self.partitions > 1

    @property
    def mask(self) -> int:
        return self.partitions - 1

    def sql(self, template: str) -> str:
        """``template`` with its ``[[...]]`` segments kept (partitioned) or dropped."""
        found = self._cache.get(template)
        if found is None:
            keep = (lambda m: m.group(1)) if self.partitioned else (lambda m: "")
            found = _SEGMENT.sub(keep, template).replace("{mask}", str(self.mask)).replace(
                "{parts}", str(self.partitions))
            self._cache[template] = found
        return found

    def part(self, key: int) -> int:
        """The partition of an id or a fingerprint."""
        return key & self.mask

    def id_key(self, url_id: int) -> tuple[int, ...]:
        """Parameters of ``ID_IS``: the id, and its partition where there are partitions."""
        return (url_id, url_id & self.mask) if self.partitioned else (url_id,)

    def parts_of(self, keys: Iterable[int]) -> list[int]:
        """The partitions ``keys`` (ids or fingerprints) fall in, each once, ascending."""
        return sorted({key & self.mask for key in keys})

    def groups(self, keys: Iterable[int]) -> dict[int, list[int]]:
        """``keys`` by partition (one group, 0, when unpartitioned), partitions ascending."""
        if not self.partitioned:
            keys = list(keys)
            return {0: keys} if keys else {}
        grouped: dict[int, list[int]] = {}
        for key in keys:
            grouped.setdefault(key & self.mask, []).append(key)
        return dict(sorted(grouped.items()))


UNPARTITIONED = LinkLayout(1)


def requested_partitions(environ: Mapping[str, str] = os.environ) -> int:
    """The partitions ``JLSE_LINK_PARTITIONS`` asks a new database for: 1 (unpartitioned) when
    unset, empty or 0; a ``ValueError`` naming the variable for anything but 0 or a power of
    two from 2 to ``MAX_LINK_PARTITIONS``."""
    raw = environ.get(PARTITIONS_ENV, "").strip() or "0"
    count = int(raw) if raw.isdigit() else -1
    if count == 0:
        return 1
    if count < 2 or count > MAX_LINK_PARTITIONS or count & (count - 1):
        raise ValueError(f"{PARTITIONS_ENV}={raw!r}: use 0 (no partitions, the default) or a "
                         f"power of two from 2 to {MAX_LINK_PARTITIONS}")
    return count

# A lookup of one link by id, with ``LinkLayout.id_key``'s parameters (``?`` placeholders).
ID_IS = "id = ?[[ AND part = ?]]"


def partition_ddl(partitions: int) -> list[str]:
    """The partitions of ``links`` (the table made ``PARTITION BY LIST (part)``)."""
    return [f"CREATE TABLE IF NOT EXISTS links_p{part} PARTITION OF links FOR VALUES IN ({part})"
            " WITH (fillfactor = 80)" for part in range(partitions)]
