"""Distributed crawls registered in Redis: what every worker, the dispatcher and the CLI share.

Keys (R = the root prefix, ``jlse:`` unless ``JLSE_KEY_PREFIX`` is set; C = R + crawl id + ":"):

=====================  ======  ================================================================
R + "crawls"           set     ids of the crawls the dispatcher serves (status running)
C + "config"           string  JSON: settings, store URL (no password), seeds, max_pages,
                               status running|done|stopped, created_at, reason
C + "model"            string  the topic model: ``.npz`` of raw arrays + JSON header (no pickle)
C + "counters"         hash    fetched, relevant, targets, rejected, requeued,
                               learned_at_results, pages_per_s (dispatcher's estimate)
C + "hosts"            hash    host -> pages fetched (``max_pages_per_host`` across workers)
                               and ``ledger.domain_keys``: @domain -> pages, #domain -> hosts
C + "robots_failures"  hash    host -> robots.txt unavailable so far (requeue limit)
C + "workers"          hash    worker name -> Q-table version it serves (status, tests)
C + "frontier:"        -       the ``RedisFrontier`` keys
C + "qtable:"          -       the ``RedisQTableStore`` keys
=====================  ======  ================================================================

PostgreSQL stays the source of truth: the config and model are also kept in the crawl
database's meta table, so ``jlse frontier rebuild`` restores a crawl whose Redis keys are gone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import redis

from jlse.records import CrawlTask
from jlse.scheduler import redis_scripts
from jlse.scheduler.ledger import HostLedger, domain_keys, with_domain_counts
from jlse.scheduler.redis_frontier import RedisFrontier, fingerprint
from jlse.scheduler.urls import host_of
from jlse.settings import Settings, apply_overrides

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# A worker's transactions issue their statements back to back; one idle for longer has lost its
# client (a partitioned or frozen machine) and must not hold row locks that stall every worker.
IDLE_TRANSACTION_TIMEOUT_MS = 5000
COUNTER_FIELDS = ("fetched", "relevant", "targets", "rejected", "requeued", "learned_at_results")
STATUSES = ("starting", "running", "done", "stopped")
_CRAWL_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")

# ARGV: counters key, targets now, cf. Claims a learning round once per cf new results.
_CLAIM_LEARN = r"""
local learned = tonumber(redis.call('HGET', KEYS[1], 'learned_at_results') or '0')
local targets, cf = tonumber(ARGV[1]), tonumber(ARGV[2])
if targets >= learned + cf then
  redis.call('HSET', KEYS[1], 'learned_at_results', targets)
  return 1
end
return 0
"""


class RegistryError(RuntimeError):
    """A crawl is missing from Redis or its registration is unreadable."""


@dataclass
class TaskStart:
    """What a worker checks before a task (``CrawlRegistry.task_start``)."""

    lease_current: bool  # the task's lease is the live one (see ``RedisFrontier.lease_current``)
    host_fetched: int  # pages fetched from the task's host so far
    robots_failures: int  # robots.txt of the task's host unavailable so far


def config_sha1(raw: bytes) -> str:
    """The digest a registered config is checked against (Lua's ``redis.sha1hex``)."""
    return hashlib.sha1(raw).hexdigest()


def settings_from_config(config: dict[str, Any]) -> Settings:
    """The crawl's settings as registered (validated again)."""
    return apply_overrides(Settings(), config["settings"], source="crawl config in Redis")


def redis_url() -> str:
    """The frontier/registry Redis: ``REDIS_URL``, default the local Redis, db 0."""
    return os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL


def broker_url() -> str:
    """The Celery broker: ``CELERY_BROKER_URL``, else db 1 of ``REDIS_URL``'s server (the
    frontier and the broker keep separate databases)."""
    explicit = os.environ.get("CELERY_BROKER_URL")
    if explicit:
        return explicit
    parts = urlsplit(redis_url())
    return urlunsplit((parts.scheme, parts.netloc, "/1", parts.query, parts.fragment))


def key_prefix() -> str:
    """The root of every registry key (tests use a private one)."""
    return os.environ.get("JLSE_KEY_PREFIX") or "jlse:"


def check_crawl_id(crawl_id: str) -> str:
    if not _CRAWL_ID.match(crawl_id):
        raise ValueError(f"crawl id {crawl_id!r}: use 1-100 letters, digits, '_', '.' or '-'")
    return crawl_id


def worker_store_url(url: str) -> str:
    """``url`` with PostgreSQL's ``idle_in_transaction_session_timeout`` for worker sessions
    (added to libpq ``options``; other URLs are returned unchanged)."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        return url
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    timeout = f"-c idle_in_transaction_session_timeout={IDLE_TRANSACTION_TIMEOUT_MS}"
    query["options"] = f"{query['options']} {timeout}" if query.get("options") else timeout
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def connect(url: str | None = None) -> redis.Redis:
    """A binary-safe client (models and Q-tables are bytes)."""
    return redis.Redis.from_url(url or redis_url(), socket_connect_timeout=5,
                                health_check_interval=30)


class CrawlRegistry:
    """Reads and writes the registry keys above for any number of crawls."""

    def __init__(self, client: redis.Redis, root: str | None = None) -> None:
        self.client = client
        self.root = root if root is not None else key_prefix()
        self._claim_learn = client.register_script(_CLAIM_LEARN)
        self._task_start = client.register_script(redis_scripts.TASK_START)

    def prefix(self, crawl_id: str) -> str:
        return f"{self.root}{check_crawl_id(crawl_id)}:"

    def frontier_prefix(self, crawl_id: str) -> str:
        return self.prefix(crawl_id) + "frontier:"

    def qtable_prefix(self, crawl_id: str) -> str:
        return self.prefix(crawl_id) + "qtable:"

    def frontier(self, crawl_id: str, settings: Settings | None = None) -> RedisFrontier:
        """The crawl's frontier (the only place one is built); without ``settings``, for
        operations that need no limits (leases, stats)."""
        settings = settings or Settings()
        return RedisFrontier(self.client, self.frontier_prefix(crawl_id),
                             max_size=settings.frontier_size,
                             lease_seconds=settings.lease_seconds,
                             default_delay=settings.politeness_delay,
                             diversity=settings.domain_diversity,
                             slack=settings.priority_slack,
                             counters_key=self.prefix(crawl_id) + "counters")

    # -- registration ---------------------------------------------------------------------

    def register(self, crawl_id: str, config: dict[str, Any], model: bytes | None,
                 counters: dict[str, int | float]) -> None:
        """Write config, model and counters, and make the crawl active (one transaction)."""
        p = self.prefix(crawl_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.set(p + "config", json.dumps(config))
        if model is None:
            pipe.delete(p + "model")
        else:
            pipe.set(p + "model", model)
        pipe.delete(p + "counters")
        pipe.hset(p + "counters", mapping={k: counters.get(k, 0) for k in COUNTER_FIELDS})
        if config.get("status") == "running":
            pipe.sadd(self.root + "crawls", crawl_id)
        pipe.execute()

    def exists(self, crawl_id: str) -> bool:
        return bool(self.client.exists(self.prefix(crawl_id) + "config"))

    def config(self, crawl_id: str) -> dict[str, Any]:
        raw = self.client.get(self.prefix(crawl_id) + "config")
        if raw is None:
            raise RegistryError(f"crawl {crawl_id!r} is not registered in Redis")
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise RegistryError(f"crawl {crawl_id!r}: unreadable config ({exc})") from None

    def config_raw(self, crawl_id: str) -> bytes | None:
        return self.client.get(self.prefix(crawl_id) + "config")

    def model_bytes(self, crawl_id: str) -> bytes | None:
        return self.client.get(self.prefix(crawl_id) + "model")

    def set_status(self, crawl_id: str, status: str, reason: str = "") -> None:
        """Change the status in the config (WATCH: never loses a concurrent edit)."""
        if status not in STATUSES:
            raise ValueError(f"unknown crawl status {status!r}")
        key = self.prefix(crawl_id) + "config"
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key)
                    raw = pipe.get(key)
                    if raw is None:
                        pipe.reset()
                        raise RegistryError(f"crawl {crawl_id!r} is not registered in Redis")
                    config = json.loads(raw)
                    config.update(status=status, reason=reason)
                    pipe.multi()
                    pipe.set(key, json.dumps(config))
                    if status == "running":
                        pipe.sadd(self.root + "crawls", crawl_id)
                    else:
                        pipe.srem(self.root + "crawls", crawl_id)
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue

    def active(self) -> list[str]:
        return sorted(member.decode() for member in self.client.smembers(self.root + "crawls"))

    def known(self) -> list[str]:
        """Every registered crawl id (active or not)."""
        pattern = _glob_escape(self.root) + "*:config"
        ids = (key.decode()[len(self.root):-len(":config")]
               for key in self.client.scan_iter(match=pattern, count=1000))
        return sorted(crawl_id for crawl_id in ids if _CRAWL_ID.match(crawl_id))

    # -- counters -------------------------------------------------------------------------

    def counters(self, crawl_id: str) -> dict[str, float]:
        raw = self.client.hgetall(self.prefix(crawl_id) + "counters")
        values = {key.decode(): float(value) for key, value in raw.items()}
        for name in COUNTER_FIELDS:
            values.setdefault(name, 0.0)
        return values

    def bump(self, crawl_id: str, **deltas: int) -> dict[str, int]:
        """Add to counters in one round trip; the new values of those counters."""
        key = self.prefix(crawl_id) + "counters"
        pipe = self.client.pipeline(transaction=False)
        names = [name for name, delta in deltas.items() if delta]
        for name in names:
            pipe.hincrby(key, name, deltas[name])
        return dict(zip(names, (int(v) for v in pipe.execute()), strict=True))

    def set_counter(self, crawl_id: str, name: str, value: float) -> None:
        self.client.hset(self.prefix(crawl_id) + "counters", name, value)

    def claim_learning(self, crawl_id: str, targets: int, cf: int) -> bool:
        """True for exactly one caller each time the results grew by ``cf`` since the last."""
        key = self.prefix(crawl_id) + "counters"
        return bool(self._claim_learn(keys=[key], args=[targets, cf]))

    # -- per-host state -------------------------------------------------------------------

    def host_counts(self, crawl_id: str, hosts: list[str]) -> dict[str, int]:
        """Pages fetched per host, for ``hosts`` (one round trip)."""
        if not hosts:
            return {}
        values = self.client.hmget(self.prefix(crawl_id) + "hosts", hosts)
        return {host: int(value or 0) for host, value in zip(hosts, values, strict=True)}

    def note_host_fetch(self, crawl_id: str, host: str) -> int:
        return int(self.client.hincrby(self.prefix(crawl_id) + "hosts", host.lower(), 1))

    def fetch_counts(self, crawl_id: str, fetched: str | None, hosts: list[str]
                     ) -> dict[str, int]:
        """``note_host_fetch(fetched)`` unless None, then ``host_counts(hosts)``: one round
        trip."""
        key = self.prefix(crawl_id) + "hosts"
        pipe = self.client.pipeline(transaction=False)
        if fetched is not None:  # the host, and its registered domain's pages (``HostLedger``)
            pipe.hincrby(key, fetched.lower(), 1)
            pipe.hincrby(key, domain_keys(fetched)[0], 1)
        if hosts:
            pipe.hmget(key, hosts)
        replies = pipe.execute()  # also when only counting: a page without links counts too
        if fetched is not None and replies[0] == 1:  # the host's first page: one more host
            self.client.hincrby(key, domain_keys(fetched)[1], 1)
        values = replies[-1] if hosts else []
        return {host: int(value or 0) for host, value in zip(hosts, values, strict=True)}

    def task_start(self, crawl_id: str, config_digest: str, task: CrawlTask,
                   deadline: float | None = None) -> TaskStart | None:
        """A worker's checks before ``task`` in one round trip; None when the crawl's config
        is gone or is no longer the one whose ``config_sha1`` is ``config_digest``. A live
        lease gets ``deadline`` (frontier clock) if one is given."""
        host = host_of(task.url)
        args = [self.frontier_prefix(crawl_id), fingerprint(task.url), getattr(task, "lease", ""),
                self.prefix(crawl_id) + "config", config_digest, self.prefix(crawl_id) + "hosts",
                self.prefix(crawl_id) + "robots_failures", host,
                "" if deadline is None else repr(deadline)]
        reply = self._task_start(args=args)
        if not reply[0]:
            return None
        return TaskStart(bool(reply[1]), int(reply[2]), int(reply[3]))

    def set_host_counts(self, crawl_id: str, counts: dict[str, int]) -> None:
        key = self.prefix(crawl_id) + "hosts"
        self.client.delete(key)
        if counts:
            self.client.hset(key, mapping=with_domain_counts(counts))

    def robots_failures(self, crawl_id: str, host: str) -> int:
        return int(self.client.hget(self.prefix(crawl_id) + "robots_failures", host) or 0)

    def note_robots_failure(self, crawl_id: str, host: str) -> int:
        return int(self.client.hincrby(self.prefix(crawl_id) + "robots_failures", host, 1))

    def note_worker(self, crawl_id: str, worker: str, qtable_version: int) -> None:
        self.client.hset(self.prefix(crawl_id) + "workers", worker, qtable_version)

    def workers(self, crawl_id: str) -> dict[str, int]:
        raw = self.client.hgetall(self.prefix(crawl_id) + "workers")
        return {key.decode(): int(value) for key, value in raw.items()}

    def clear(self, crawl_id: str) -> int:
        """Delete every key of the crawl (frontier and Q-tables too); how many."""
        self.client.srem(self.root + "crawls", crawl_id)
        keys = list(self.client.scan_iter(match=_glob_escape(self.prefix(crawl_id)) + "*",
                                          count=1000))
        return sum(self.client.unlink(*keys[i:i + 1000]) for i in range(0, len(keys), 1000))


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


class RedisHostLedger(HostLedger):
    def __init__(self, registry: CrawlRegistry, crawl_id: str) -> None:
        self.registry = registry
        self.crawl_id = crawl_id

    def fetch_counts(self, fetched_host: str | None, hosts: Sequence[str]) -> dict[str, int]:
        return self.registry.fetch_counts(self.crawl_id, fetched_host, list(hosts))

    def robots_failures(self, host: str) -> int:
        return self.registry.robots_failures(self.crawl_id, host)

    def note_robots_failure(self, host: str) -> int:
        return self.registry.note_robots_failure(self.crawl_id, host)
