"""robots.txt answers shared by every worker process of a cluster, in the host's shard.

Without it each process keeps its own robots.txt cache, and Celery gives a host's URLs to any
process: a host's robots.txt was fetched by about sqrt(pi P / 2) of P processes before its first
page. The frontier keeps one request in flight per host, so the process that fetches a host's
first URL fetches its robots.txt alone, and every later one reads the answer here:
one robots.txt request per host and crawl (two where the first was unreachable: that answer is
kept only ``robots_retry_after`` seconds).

Key: S + "robots:" + origin (S = the shard prefix of the origin's host), a string expiring with
the answer (``robots_cache_ttl``, or ``robots_retry_after`` when unreachable). Value: outcome,
status code and error as tab-separated text, a newline, then the body compressed with zlib and
cut at ``MAX_BODY`` bytes (RFC 9309 asks crawlers to read at least 500 KiB). Nothing pickled.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis

from jlse.records import Outcome
from jlse.scheduler.robots import RobotsResponse
from jlse.scheduler.shards import shard_of, shard_prefix

log = logging.getLogger(__name__)

MAX_BODY = 512 * 1024  # characters of a robots.txt kept (RFC 9309: at least 500 KiB parsed)


@dataclass(frozen=True)
class StoredRobots:
    """A robots.txt answer as another process got it (``RobotsResponse``)."""

    outcome: Outcome
    status_code: int | None
    text: str | None
    error: str = ""


def encode(response: RobotsResponse) -> bytes:
    status = "" if response.status_code is None else str(response.status_code)
    error = (response.error or "").replace("\t", " ").replace("\n", " ")
    head = f"{response.outcome.value}\t{status}\t{error}\n".encode()
    text = response.text
    return head + (b"" if text is None else zlib.compress(text[:MAX_BODY].encode(), 6))


def decode(value: bytes) -> StoredRobots | None:
    """The stored answer, None if it is not one this code wrote."""
    head, _, body = value.partition(b"\n")
    try:
        outcome, status, error = head.decode().split("\t", 2)
        text = zlib.decompress(body).decode() if body else None
        return StoredRobots(Outcome(outcome), int(status) if status else None, text, error)
    except (ValueError, zlib.error, UnicodeDecodeError):
        return None


class RedisRobotsStore:
    """``robots.SharedRobots`` in Redis: one crawl's answers, each in its host's shard."""

    def __init__(self, client: Any, crawl_prefix: str, crawl_id: str, shards: int) -> None:
        self.client = client
        self.crawl_prefix = crawl_prefix
        self.crawl_id = crawl_id
        self.shards = shards

    def key(self, origin: str) -> str:
        host = urlsplit(origin).hostname or ""
        shard = shard_of(host, self.shards)
        return shard_prefix(self.crawl_prefix, self.crawl_id, shard) + "robots:" + origin

    def get(self, origin: str) -> StoredRobots | None:
        try:
            value = self.client.get(self.key(origin))
        except redis.RedisError as exc:  # fetch it ourselves: politeness is the frontier's
            log.warning("shared robots.txt cache unavailable (%s)", exc)
            return None
        return decode(value) if value is not None else None

    def put(self, origin: str, response: RobotsResponse, ttl: float) -> None:
        try:
            self.client.set(self.key(origin), encode(response), px=max(1, int(ttl * 1000)))
        except redis.RedisError as exc:
            log.warning("shared robots.txt cache unavailable (%s)", exc)
