"""Distributed crawls registered in Redis: what every worker, the dispatcher and the CLI share.

Keys (R = the root prefix, ``jlse:`` unless ``JLSE_KEY_PREFIX`` is set; C = R + crawl id + ":"):

=====================  ======  ================================================================
R + "crawls"           set     ids of the crawls the dispatcher serves (status running)
C + "config"           string  JSON: settings, store URL (no password), seeds, max_pages,
                               status running|done|stopped, created_at, reason
C + "model"            string  the topic model: ``.npz`` of raw arrays + JSON header (no pickle)
C + "counters"         hash    learned_at_results, learn_targets (the learning claim), and
                               what a shard's counters hold when read as the crawl's sum
C + "workers"          hash    worker name -> Q-table version it serves (status, tests)
C + "{<id>.q}:qtable:"  -       the ``RedisQTableStore`` keys (one hash tag)
S + "state"            hash    active (1 while running), sha1 (of the config, as registered)
S + "counters"         hash    fetched, relevant, targets, rejected, requeued, pages_per_s...
                               (the crawl's counters are the sum over its shards)
S + "hosts"            hash    host -> pages fetched (``max_pages_per_host`` across workers)
                               and ``ledger.domain_keys``: @domain -> pages, #domain -> hosts
S + "robots_failures"  hash    host -> robots.txt unavailable so far (requeue limit)
S + "f:"               -       the shard's ``RedisFrontier`` keys
=====================  ======  ================================================================

S is the prefix of one shard of the crawl (``shards.shard_prefix``: C + "{<crawl id>.<shard>}:",
a Redis Cluster hash tag): everything a page's fetch touches lives in its host's shard, so the
hot path never leaves one slot. The crawl-level keys are read at registration, by status and by
each process once per crawl (the config is checked per task against its shard's ``sha1``).

PostgreSQL stays the source of truth: the config and model are also kept in the crawl
database's meta table, so ``jlse frontier rebuild`` restores a crawl whose Redis keys are gone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import redis

from jlse.records import CrawlTask
from jlse.scheduler import redis_client, redis_scripts
from jlse.scheduler.redis_frontier import RedisFrontier, fingerprint
from jlse.scheduler.sharded_frontier import ShardedFrontier
from jlse.scheduler.shards import shard_diversity, shard_of, shard_prefix
from jlse.scheduler.urls import host_of
from jlse.settings import Settings, apply_overrides

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# A worker's transactions issue their statements back to back; one idle for longer has lost its
# client (a partitioned or frozen machine) and must not hold row locks that stall every worker.
IDLE_TRANSACTION_TIMEOUT_MS = 5000
LEARN_PENDING_SECONDS = 600  # a learning round sent but not started by then is sent again
COUNTER_FIELDS = ("fetched", "relevant", "targets", "rejected", "requeued", "learned_at_results")
CRAWL_COUNTERS = ("learned_at_results", "learn_targets", "pages_per_s")  # not per shard
STATUSES = ("starting", "running", "done", "stopped")
_CRAWL_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")

# ARGV: counters key, targets now, cf. Claims a learning round once per cf new results.
# ARGV: results so far, cf, now, seconds a sent round stays pending at most. 1: send a round.
_CLAIM_LEARN = r"""
local learned = tonumber(redis.call('HGET', KEYS[1], 'learned_at_results') or '0')
local targets, cf, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if targets < learned + cf then return 0 end
redis.call('HSET', KEYS[1], 'learned_at_results', targets)
local pending = tonumber(redis.call('HGET', KEYS[1], 'learn_pending_until') or '0')
if pending > now then return 0 end  -- the round waiting in the queue will read these too
redis.call('HSET', KEYS[1], 'learn_pending_until', now + tonumber(ARGV[4]))
return 1
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
    """The digest a registered config is checked against (each shard's ``state``): of the
    config without its status and reason, so a status change (set in the config first, in the
    shards after) never makes a worker read it as a new registration. Unreadable JSON has the
    digest of its bytes."""
    try:
        config = json.loads(raw)
    except ValueError:
        return hashlib.sha1(raw).hexdigest()
    if isinstance(config, dict):
        config = {key: value for key, value in config.items() if key not in ("status", "reason")}
    return hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()


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
    """A binary-safe client (models and Q-tables are bytes) of one Redis or a Redis Cluster
    (``redis+cluster://``: ``scheduler.redis_client``)."""
    return redis_client.connect(url or redis_url())


REFUSAL_TTL = 180  # seconds a worker's refusal of a crawl is shown after its last


class CrawlRegistry:
    """Reads and writes the registry keys above for any number of crawls.

    Methods that touch a shard take ``shards``, the crawl's ``frontier_shards``; without it they
    read the crawl's config (one more round trip: callers on the hot path pass it)."""

    def __init__(self, client: redis.Redis, root: str | None = None) -> None:
        self.client = client
        self.root = root if root is not None else key_prefix()
        if "{" in self.root or "}" in self.root:
            raise ValueError(f"key prefix {self.root!r}: braces would change the hash slots")
        self._claim_learn = client.register_script(_CLAIM_LEARN)
        self._task_start = client.register_script(redis_scripts.TASK_START)
        self._replicas: int | None = None

    def prefix(self, crawl_id: str) -> str:
        return f"{self.root}{check_crawl_id(crawl_id)}:"

    def shard_prefix(self, crawl_id: str, shard: int) -> str:
        """S: the prefix of a shard's keys (its state, counters, host ledger...)."""
        return shard_prefix(self.prefix(crawl_id), crawl_id, shard)

    def frontier_prefix(self, crawl_id: str, shard: int = 0) -> str:
        """S + "f:": the prefix of the shard's ``RedisFrontier`` keys (``rebuild`` and
        ``clear`` touch these only)."""
        return self.shard_prefix(crawl_id, shard) + "f:"

    def qtable_prefix(self, crawl_id: str) -> str:
        """The Q-tables' keys: one hash tag, so the publishing scripts run on a cluster."""
        return f"{self.prefix(crawl_id)}{{{crawl_id}.q}}:qtable:"

    def shard_count(self, crawl_id: str, shards: int | None = None) -> int:
        """``shards`` if given, else the registered config's ``frontier_shards`` (1 if the
        crawl is not registered)."""
        if shards is not None:
            return shards
        raw = self.config_raw(crawl_id)
        if raw is None:
            return 1
        try:
            return int(json.loads(raw)["settings"].get("frontier_shards", 1))
        except (ValueError, KeyError, TypeError, AttributeError):
            return 1

    def shard_frontier(self, crawl_id: str, shard: int, settings: Settings) -> RedisFrontier:
        """One shard of the crawl's frontier."""
        prefix = self.shard_prefix(crawl_id, shard)
        if self._replicas is None:  # pushes wait for one replica where masters have one
            self._replicas = redis_client.replicas(self.client)
        return RedisFrontier(self.client, prefix + "f:", max_size=settings.frontier_size,
                             wait_replicas=min(self._replicas, 1),
                             window=settings.host_window, lease_seconds=settings.lease_seconds,
                             default_delay=settings.politeness_delay,
                             diversity=shard_diversity(settings.domain_diversity,
                                                       settings.frontier_shards),
                             slack=settings.priority_slack, counters_key=prefix + "counters")

    def frontier(self, crawl_id: str, settings: Settings | None = None) -> ShardedFrontier:
        """The crawl's frontier, every shard (the only place one is built); without
        ``settings``, the registered ones (or the defaults if the crawl is not registered)."""
        if settings is None:
            settings = self._registered_settings(crawl_id)
        return ShardedFrontier([self.shard_frontier(crawl_id, shard, settings)
                                for shard in range(settings.frontier_shards)])

    def _registered_settings(self, crawl_id: str) -> Settings:
        raw = self.config_raw(crawl_id)
        if raw is None:
            return Settings()
        try:
            return settings_from_config(json.loads(raw))
        except (ValueError, KeyError, TypeError):
            return Settings()

    # -- registration ---------------------------------------------------------------------

    def register(self, crawl_id: str, config: dict[str, Any], model: bytes | None,
                 counters: dict[str, int | float]) -> None:
        """Write config, model, counters (the crawl's figures go to shard 0: the counters are
        a sum) and each shard's state, and make the crawl active if it is running. The shards
        are written before the crawl joins the active set."""
        p = self.prefix(crawl_id)
        raw = json.dumps(config)
        shards = int(config.get("settings", {}).get("frontier_shards", 1))
        pipe = self.client.pipeline(transaction=False)
        pipe.set(p + "config", raw)
        if model is None:
            pipe.delete(p + "model")
        else:
            pipe.set(p + "model", model)
        pipe.delete(p + "counters")
        learned = counters.get("learned_at_results", 0)
        pipe.hset(p + "counters", mapping={"learned_at_results": learned,
                                           "learn_targets": counters.get("targets", 0)})
        active = "1" if config.get("status") == "running" else "0"
        for shard in range(shards):
            s = self.shard_prefix(crawl_id, shard)
            pipe.delete(s + "counters")
            pipe.hset(s + "counters", mapping={k: counters.get(k, 0) if shard == 0 else 0
                                               for k in COUNTER_FIELDS if k not in CRAWL_COUNTERS})
            pipe.hset(s + "state", mapping={"sha1": config_sha1(raw.encode()), "active": active})
        pipe.execute()
        if active == "1":
            self.client.sadd(self.root + "crawls", crawl_id)

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
        """Change the status in the config (WATCH: never loses a concurrent edit), then each
        shard's state and the active set."""
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
                    pipe.execute()
                    break
                except redis.WatchError:
                    continue
        self._set_active(crawl_id, config, status == "running")

    def _set_active(self, crawl_id: str, config: dict[str, Any], active: bool) -> None:
        """Each shard's state, then the active set (a crawl joins it only once its shards say
        so; a stopped one leaves its shards first)."""
        shards = int(config.get("settings", {}).get("frontier_shards", 1))
        pipe = self.client.pipeline(transaction=False)
        for shard in range(shards):
            pipe.hset(self.shard_prefix(crawl_id, shard) + "state", "active", int(active))
        pipe.execute()
        if active:
            self.client.sadd(self.root + "crawls", crawl_id)
        else:
            self.client.srem(self.root + "crawls", crawl_id)

    def active(self) -> list[str]:
        return sorted(member.decode() for member in self.client.smembers(self.root + "crawls"))

    def known(self) -> list[str]:
        """Every registered crawl id (active or not)."""
        pattern = redis_client.glob_escape(self.root) + "*:config"
        ids = (key.decode()[len(self.root):-len(":config")]
               for key in redis_client.scan_keys(self.client, pattern))
        return sorted(crawl_id for crawl_id in ids if _CRAWL_ID.match(crawl_id))

    # -- counters -------------------------------------------------------------------------

    def counters(self, crawl_id: str, shards: int | None = None) -> dict[str, float]:
        """The crawl's counters: its own and the sum of its shards' (one pipelined read)."""
        shards = self.shard_count(crawl_id, shards)
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self.prefix(crawl_id) + "counters")
        for shard in range(shards):
            pipe.hgetall(self.shard_prefix(crawl_id, shard) + "counters")
        crawl, *per_shard = pipe.execute()
        values = {key.decode(): float(value) for key, value in crawl.items()
                  if key != b"learn_pending_until"}  # a time, not a counter (claim_learning)
        for raw in per_shard:
            for key, value in raw.items():
                name = key.decode()
                values[name] = values.get(name, 0.0) + float(value)
        for name in COUNTER_FIELDS:
            values.setdefault(name, 0.0)
        return values

    def bump(self, crawl_id: str, shard: int = 0, **deltas: int) -> dict[str, int]:
        """Add to one shard's counters in one round trip; the new values of those counters."""
        key = self.shard_prefix(crawl_id, shard) + "counters"
        pipe = self.client.pipeline(transaction=False)
        names = [name for name, delta in deltas.items() if delta]
        for name in names:
            pipe.hincrby(key, name, deltas[name])
        return dict(zip(names, (int(v) for v in pipe.execute()), strict=True))

    def set_counter(self, crawl_id: str, name: str, value: float, shard: int | None = None
                    ) -> None:
        """Set a counter of the crawl (``shard`` None) or of one shard (summed when read)."""
        key = (self.prefix(crawl_id) if shard is None else self.shard_prefix(crawl_id, shard))
        self.client.hset(key + "counters", name, value)

    def claim_learning(self, crawl_id: str, targets: int, cf: int) -> bool:
        """True for exactly one caller each time the results grew by ``cf`` since the last,
        unless a round sent earlier has not started yet (``learning_started``; or sent more
        than ``LEARN_PENDING_SECONDS`` ago): requests coalesce, the queue never grows."""
        key = self.prefix(crawl_id) + "counters"
        return bool(self._claim_learn(keys=[key], args=[targets, cf, repr(time.time()),
                                                        LEARN_PENDING_SECONDS]))

    def learning_started(self, crawl_id: str) -> None:
        """A learning round began: results from now on may send the next one."""
        self.client.hdel(self.prefix(crawl_id) + "counters", "learn_pending_until")

    def claim_learning_step(self, crawl_id: str, step: int, cf: int) -> bool:
        """A shard's results grew by ``step`` (a sharded crawl counts its results per shard):
        add them to the crawl's learning count and ``claim_learning`` on it."""
        total = self.client.hincrby(self.prefix(crawl_id) + "counters", "learn_targets", step)
        return self.claim_learning(crawl_id, int(total), cf)

    # -- the checks before a task (in the task's shard) ---------------------------------

    def task_start(self, crawl_id: str, config_digest: str, task: CrawlTask,
                   deadline: float | None = None, shards: int | None = None) -> TaskStart | None:
        """A worker's checks before ``task`` in one round trip to the task's shard; None when
        the crawl's config is gone or is no longer the one whose ``config_sha1`` is
        ``config_digest``. A live lease gets ``deadline`` (frontier clock) if one is given."""
        host = host_of(task.url)
        s = self.shard_prefix(crawl_id, shard_of(host, self.shard_count(crawl_id, shards)))
        args = [s + "f:", fingerprint(task.url), getattr(task, "lease", ""), s + "state",
                config_digest, s + "hosts", s + "robots_failures", host,
                "" if deadline is None else repr(deadline)]
        reply = self._task_start(keys=[s + "f:ready"], args=args)
        if not reply[0]:
            return None
        return TaskStart(bool(reply[1]), int(reply[2]), int(reply[3]))

    def note_worker(self, crawl_id: str, worker: str, qtable_version: int) -> None:
        self.client.hset(self.prefix(crawl_id) + "workers", worker, qtable_version)

    def note_refusal(self, crawl_id: str, worker: str, reason: str) -> None:
        """A worker refuses the crawl (its config is not one this worker may serve): kept
        ``REFUSAL_TTL`` seconds after the last, for ``jlse status`` and the crawl's screen."""
        key = self.prefix(crawl_id) + "refusals"
        self.client.hset(key, worker, reason[:500])
        self.client.expire(key, REFUSAL_TTL)

    def refusals(self, crawl_id: str) -> dict[str, str]:
        """Worker -> why it refuses the crawl (the last few minutes')."""
        raw = self.client.hgetall(self.prefix(crawl_id) + "refusals")
        return {key.decode(): value.decode() for key, value in raw.items()}

    def workers(self, crawl_id: str) -> dict[str, int]:
        raw = self.client.hgetall(self.prefix(crawl_id) + "workers")
        return {key.decode(): int(value) for key, value in raw.items()}

    def clear(self, crawl_id: str) -> int:
        """Delete every key of the crawl (every shard, Q-tables too); how many."""
        self.client.srem(self.root + "crawls", crawl_id)
        pattern = redis_client.glob_escape(self.prefix(crawl_id)) + "*"
        return redis_client.delete_keys(self.client, redis_client.scan_keys(self.client, pattern))
