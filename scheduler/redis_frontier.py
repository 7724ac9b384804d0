"""The distributed frontier: one shard's priority queue in Redis, shared by every machine.

A crawl's frontier is one or more shards (``scheduler.shards``; ``ShardedFrontier`` routes each
URL to its host's shard): this class is one shard, under a prefix that carries the shard's
Redis Cluster hash tag. On one plain Redis a crawl of one shard is the default.

Mercator-style layout: a queue per host plus two host indexes, so a pop never scans the hosts.

- Priority order within the shard: ``ready`` is a sorted set of the hosts that may be contacted now, each
  scored by the priority of its best queued URL; a pop takes its top host and that host's best
  URL. Ties (equal priority) go in discovery order, across hosts too (see ``redis_scripts``).
  ``best`` indexes every host (ready, sleeping or busy) by its best URL, so ``best_priority``
  is one ZREVRANGE (with ``within``, a short walk of it past the hosts asleep for longer);
  ``pop(min_priority=…)`` leases nothing when the best ready URL is below it (the
  low-priority slots rule of ``jlse.embedded``, applied atomically).
- Politeness across all machines: a popped host leaves ``ready`` and is ``busy`` (one request in
  flight per host) until its lease ends; then it sleeps in ``sleep`` (scored by ready time) for
  ``max(delay, default_delay)`` and every pop promotes the sleepers whose time has come. A hot
  host therefore holds at most one worker; the others take the next ready hosts. (There is no
  ``host_concurrency``: more than one request per host is ``LocalFrontier``'s alone.)
- Domain diversity (soft, ``LocalFrontier``'s rule): a pop prefers a ready host whose
  registered domain is not among those of the last ``diversity - 1`` popped (``recent``, shared by every machine) if its best URL has at
  least ``slack`` x the best ready priority; it examines at most ``diversity`` hosts.
- Leased pops: a popped URL moves to ``lease`` with a deadline in ``deadline``. ``ack`` ends the
  lease; ``reap`` puts expired leases back in their host queues (a worker killed with SIGKILL
  loses no URL); ``release`` puts a URL back on purpose (e.g. robots.txt unavailable);
  ``lease_current`` tells a worker whether its task's lease is still the live one; ``renew``
  is a live worker's heartbeat (a dead worker's leases then end soon). Every ack
  and release also leaves a token in ``wake``, so a dispatcher blocked on it (BLPOP) sends the
  next task at once instead of polling (``scheduler.dispatcher`` pops in its own script).
- Memory that grows with hosts, not URLs: a host keeps at most ``window`` URLs in Redis (its
  best), and the shard at most ``max_size`` (beyond it the lowest URL of all is evicted:
  ``worst`` indexes every host by its lowest URL). A URL left out or evicted *spills*: it stays
  ``queued`` in the crawl database, its host's count in ``spill`` grows, and when the host's
  window runs down to half (or empties) the host is due a refill (``refill``): its best queued
  URLs come back from the database. No URL is stranded there.
- Every multi-step update is one Lua script (atomic). "now" comes from the caller's clock.
- PostgreSQL is the source of truth: ``rebuild(store)`` refills the frontier and the dedup set
  from the LinkTable after Redis lost its data (hosts then start ready; leases are dropped).

Dedup (``add_new``): 64-bit fingerprints (blake2b, 8 bytes) of canonical URLs, sharded by their
top 16 bits into 65,536 sets that hold the remaining 48 bits as integers, so Redis keeps each
set as an *intset* (8 bytes per URL) while it has at most ``set-max-intset-entries`` members:
with the 4,096 that ``ensure_memory_config`` sets, up to about 2.7e8 URLs per shard at full
compactness (with Redis's default, 512, about 3.4e7). Two URLs
collide with probability about n^2 / 2^65 (3e-8 at 1 million URLs, 3e-6 at 10 million); a
collision makes the second URL look already seen. A Bloom filter of similar size would drop
*unseen* URLs at its false-positive rate (typically 1e-2..1e-3, i.e. thousands of URLs per
million), silently and with no way to find them again; exact fingerprints bound the loss to
the collision probability above. ``push``/``push_many`` neither read nor write the seen sets
(they queue what the caller knows to queue); ``mark_seen`` and ``rebuild`` only fill them.

Keys (all under the prefix P; nothing pickled - payloads are compact ``CrawlTask`` JSON;
pfx = 6 bytes of discovery order, fingerprint = 8 bytes):

====================  ======  ===============================================================
P + "q:" + host       zset    the host's queued URLs: member pfx+fingerprint, score = priority
P + "t:" + host       hash    fingerprint -> pfx + task JSON, for each URL of the host's queue
P + "queued"          string  URLs queued (``len``)
P + "spill"           hash    host -> URLs of the host spilled to the crawl database
P + "refill"          zset    hosts due a refill: score = when it may be claimed (0: now)
P + "done"            zset    fingerprints finished in the last 5 minutes (not refilled)
P + "ready"           zset    idle hosts with URLs: member pfx+host, score = best priority
P + "worst"           zset    every host with URLs: member pfx+host, score = lowest priority
P + "best"            zset    every host with URLs: member host, score = best priority
P + "sleep"           zset    host -> time it may be contacted again (not busy, waiting)
P + "busy"            set     hosts with a request in flight
P + "lease"           hash    fingerprint -> "token TAB host TAB priority TAB pfx+JSON"
P + "deadline"        zset    fingerprint -> lease deadline (unix time)
P + "lease_priority"  zset    fingerprint -> priority of the leased URL
P + "seq"             string  counter: discovery order of URLs and lease tokens
P + "evicted"         string  URLs spilled so far (a full window or a full shard)
P + "seen:" + n       set     fingerprints seen by ``add_new`` (n = top 16 bits), intset-encoded
P + "seen_count"      string  number of fingerprints in the seen sets
P + "wake"            list    at most one token: a lease ended since the dispatcher's last round
P + "low_next"        string  time before which the dispatcher sends no "low" URL
P + "recent"          list    the registered domains of the last ``diversity - 1`` pops, newest first
P + "recent_count"    hash    domain -> its entries in ``recent`` (O(1) membership)
P + "domain"          hash    host -> its registered domain, where they differ (hosts with URLs)
====================  ======  ===============================================================

Redis must run with ``maxmemory-policy noeviction`` (an evicted key would lose URLs silently);
a full Redis then refuses writes with an OOM error, which is raised to the caller. Per-host keys
are built inside the scripts from the prefix: with a hash tag in it they share the shard's slot.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol
from urllib.parse import urlsplit

import redis

from jlse.records import CrawlTask, LinkStatus
from jlse.scheduler import redis_scripts
from jlse.scheduler.frontier import Frontier
from jlse.scheduler.redis_client import (
    delete_keys,
    glob_escape,
    is_cluster,
    node_client,
    scan_keys,
    warn_unless_noeviction,
)
from jlse.scheduler.store.base import CrawlStore
from jlse.scheduler.urls import host_of, registered_domain

log = logging.getLogger(__name__)

SEEN_SHARD_BITS = 16
_SEEN_VALUE_BITS = 64 - SEEN_SHARD_BITS
_SEEN_VALUE_MASK = (1 << _SEEN_VALUE_BITS) - 1
SCRIPT_BATCH = 1000  # URLs per script call: keeps each call short (Redis runs one at a time)
REAP_BATCH = 500
WAIT_MS = 200  # a durable push waits this long at most for its replicas
UNREPLICATED_SECONDS = 30.0  # a shard whose replicas did not answer is pushed to without WAIT
REFILL_HOSTS = 50  # hosts per refill call
REFILL_UNBOUNDED = 10_000  # URLs per host and refill when hosts have no window
REFILL_SLACK = 16  # rows read beyond a window: the top ones may be in flight or just fetched
# The anchor text and context of a link stay in the crawl database only: the worker reads its
# link's row anyway (``workers.distributed``), and they are most of a task's bytes in Redis.
IN_DATABASE_ONLY = ("anchor_text", "context")
_DEFAULTS = {f.name: f.default for f in fields(CrawlTask)
             if f.name not in ("url", "url_id", *IN_DATABASE_ONLY)}


@dataclass
class LeasedTask(CrawlTask):
    """A popped task with its lease token, so a late ack cannot end a newer lease of the URL.

    The token travels in ``to_dict``; a plain ``CrawlTask`` (no token) acks any lease of its URL.
    """

    lease: str = ""


def fingerprint(url: str) -> bytes:
    """The 64-bit fingerprint of a canonical URL."""
    return hashlib.blake2b(url.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def seen_slot(fp: bytes) -> tuple[str, str]:
    """(shard, value) of a fingerprint in the seen sets."""
    number = int.from_bytes(fp, "big")
    return str(number >> _SEEN_VALUE_BITS), str(number & _SEEN_VALUE_MASK)


def task_json(task: CrawlTask) -> bytes:
    """Compact JSON of a task: fields at their default value are left out, and
    ``IN_DATABASE_ONLY``."""
    data = {"url": task.url, "url_id": task.url_id}
    for name, default in _DEFAULTS.items():
        value = getattr(task, name)
        if value != default:
            data[name] = value
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisFrontier(Frontier):
    def __init__(
        self,
        client: redis.Redis,
        prefix: str = "jlse:frontier:",
        *,
        max_size: int = 1_000_000,
        window: int = 0,
        lease_seconds: float = 300.0,
        default_delay: float = 0.0,
        diversity: int = 100,
        slack: float = 0.5,
        counters_key: str = "",
        wait_replicas: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.max_size = max_size
        self.window = window  # URLs a host keeps in Redis (0: no limit); the rest spill
        self.lease_seconds = lease_seconds
        self.default_delay = default_delay
        self.diversity = diversity  # domain diversity's k (1: off), as ``LocalFrontier``
        self.slack = slack
        self.counters_key = counters_key or prefix + "counters"  # a hash: finish's deltas
        # pushes wait until this many replicas have them: a failover keeps every URL queued
        self.wait_replicas = wait_replicas
        self._unreplicated_until = -math.inf  # until then, pushes do not wait (no replica)
        self._clock = clock
        self._keys = [prefix + "ready"]  # what a cluster routes every script call by
        self._cluster = is_cluster(client)
        scripts = {name: client.register_script(getattr(redis_scripts, name.upper()))
                   for name in _SCRIPTS}
        self._scripts = scripts
        warn_unless_noeviction(client)

    def _run(self, name: str, args: list[Any], client: Any = None) -> Any:
        return self._scripts[name](keys=self._keys, args=args, client=client)

    # -- adding URLs -----------------------------------------------------------------------

    def push_many(self, tasks: Sequence[CrawlTask]) -> list[bool]:
        """Push each task (``push`` semantics), in one round trip."""
        return self._run_push(tasks, dedup=False)

    def add_new(self, tasks: Sequence[CrawlTask]) -> list[bool]:
        """Queue the tasks whose URL fingerprint was never seen; True per task added or raised.

        A URL seen before is not queued again, but if it is still queued a higher priority is
        kept. One round trip."""
        return self._run_push(tasks, dedup=True)

    def add_discovered(self, tasks: Sequence[CrawlTask], created: Sequence[bool]) -> None:
        """``add_new``: the seen sets decide what is new (shared by every worker)."""
        self.add_new(tasks)

    def _run_push(self, tasks: Sequence[CrawlTask], dedup: bool) -> list[bool]:
        if not tasks:
            return []
        batches = []
        for start in range(0, len(tasks), SCRIPT_BATCH):
            args: list[Any] = [self.prefix, self.max_size, self.window, "1" if dedup else "0"]
            for task in tasks[start:start + SCRIPT_BATCH]:
                args.extend(_push_args(task, dedup))
            batches.append(args)
        if self.wait_replicas and time.monotonic() >= self._unreplicated_until:
            return [bool(flag) for args in batches for flag in self._push_durably(args)]
        if len(batches) == 1 or self._cluster:  # a pipeline would add a SCRIPT EXISTS trip
            return [bool(flag) for args in batches for flag in self._run("push", args)]
        pipe = self.client.pipeline(transaction=False)
        for args in batches:
            self._run("push", args, client=pipe)
        return [bool(flag) for batch in pipe.execute() for flag in batch]

    def _push_durably(self, args: list[Any]) -> list[int]:
        """PUSH, then WAIT on the same connection until ``wait_replicas`` replicas have it
        (``WAIT_MS`` at most): a push acknowledged by a master that dies before replicating is
        seen as an error by the worker (its task is retried), never lost silently. Fewer
        replicas in time (the replica is down, or a failover just promoted it): logged, the push
        stands, and pushes do not wait for ``UNREPLICATED_SECONDS``."""
        script = self._scripts["push"]
        target = node_client(self.client, self._keys[0])
        for attempt in (1, 2):
            pipe = target.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", script.sha, 1, self._keys[0], *args)
            pipe.execute_command("WAIT", self.wait_replicas, WAIT_MS)
            try:
                flags, acked = pipe.execute()
            except redis.exceptions.NoScriptError:
                if attempt == 2:
                    raise
                target.script_load(script.script)
                continue
            if int(acked) < self.wait_replicas:  # no replica (a failover just took it):
                self._unreplicated_until = time.monotonic() + UNREPLICATED_SECONDS
                log.warning("frontier shard %s: a push reached %d of %d replicas in %d ms; "
                            "pushes do not wait for %.0f s", self.prefix, int(acked),
                            self.wait_replicas, WAIT_MS, UNREPLICATED_SECONDS)
            return flags
        raise AssertionError("unreachable")

    def mark_seen(self, urls: Iterable[str]) -> int:
        """Add URLs' fingerprints to the seen sets without queueing them; how many were new."""
        args: list[str] = [self.prefix]
        for url in urls:
            args.extend(seen_slot(fingerprint(url)))
        return int(self._run("mark_seen", args)) if len(args) > 1 else 0

    # -- leased pops -----------------------------------------------------------------------

    def pop(self, min_priority: float | None = None) -> LeasedTask | None:
        """The best URL of the best ready host (domain diversity may prefer another ready
        host), leased; None if no host is ready now or (with ``min_priority``) the best ready
        URL has a lower priority."""
        bound = "" if min_priority is None else repr(float(min_priority))
        found = self._run("pop", [self.prefix, repr(self._clock()), repr(self.lease_seconds),
                                  bound, self.diversity, repr(float(self.slack)),
                                  self.max_size, self.window])
        if not found:
            return None
        body, token = found
        task = LeasedTask.from_dict(json.loads(body))
        task.lease = _text(token)
        return task

    def ready_best(self) -> float | None:
        """The best priority among the ready hosts (sleepers whose delay passed included), None
        if no host is ready."""
        answer = self._run("ready_best", [self.prefix, repr(self._clock())])
        return None if answer is None else float(_text(answer))

    @property
    def wake_key(self) -> str:
        """The list an ack or release pushes a token to (see ``dispatch``)."""
        return self.prefix + "wake"

    def best_priority(self, within: float | None = None) -> float | None:
        """The highest priority queued, whether its host is ready, sleeping or busy; None when
        nothing is queued. O(log hosts). With ``within``: ``Frontier.best_priority`` (the
        hosts that wait longer are passed over in a walk of ``FAR_SKIPS`` at most)."""
        args = [self.prefix] if within is None else [self.prefix, repr(self._clock()),
                                                        repr(float(within))]
        answer = self._run("best_priority", args)
        return None if answer is None else float(_text(answer))

    def lease_current(self, task: CrawlTask) -> bool:
        """Whether the task's URL is leased under the task's lease token (any lease for a task
        without one): False once it was acked, reaped or handed out again."""
        args = [self.prefix, fingerprint(task.url), getattr(task, "lease", "")]
        return bool(self._run("lease_current", args))

    def renew(self, leases: Sequence[tuple[str, str]], seconds: float) -> int:
        """Set the deadline of each ``(url, lease token)`` still leased under that token to
        ``seconds`` from now: a live worker's heartbeat, so the leases of a dead one end soon
        even when ``lease_seconds`` is long. How many were renewed."""
        if not leases:
            return 0
        args: list[Any] = [self.prefix, repr(self._clock() + seconds)]
        for url, token in leases:
            args += [fingerprint(url), token]
        return int(self._run("renew", args))

    def in_flight_below(self, priority: float) -> int:
        """Leased URLs whose priority is below ``priority`` (strictly)."""
        if math.isnan(priority) or priority == -math.inf:
            return 0
        return int(self.client.zcount(self.prefix + "lease_priority", "-inf", f"({priority!r}"))

    def ack(self, task: CrawlTask, delay: float | None = None) -> bool:
        """End the task's lease; its host is ready again after ``max(delay, default_delay)``.

        False if the lease was already gone (reaped): the caller should log it."""
        return self.finish(task, delay=delay)[0]

    def release(self, task: CrawlTask, retry_after: float = 0.0) -> bool:
        """End the lease and queue the URL again (in its old place); its host is ready after
        ``max(retry_after, default_delay)``."""
        return self.finish(task, requeue=True, delay=max(retry_after, 0.0))[0]

    def now(self) -> float:
        """The frontier's clock (lease deadlines and host ready times)."""
        return self._clock()

    def finish(self, task: CrawlTask, *, requeue: bool = False, delay: float | None = None,
               deltas: dict[str, int] | None = None) -> tuple[bool, dict[str, int]]:
        """``ack`` (``release`` with ``requeue``: ``delay`` is then its ``retry_after``) and,
        with it, add ``deltas`` to the hash ``counters_key``: one atomic step, one round trip.
        (the lease was live, the new values of those counters). A lease that is gone changes
        nothing, counters included: whoever holds the live lease counts the URL, so fetched +
        in flight never exceeds what the dispatcher allowed."""
        wait = max(delay or 0.0, self.default_delay)
        names = [name for name, delta in (deltas or {}).items() if delta]
        args: list[Any] = [self.prefix, repr(self._clock()), fingerprint(task.url),
                           getattr(task, "lease", ""), repr(float(wait)),
                           "1" if requeue else "0", self.max_size, self.window,
                           self.counters_key if names else "",
                           task_json(task) if requeue else b""]
        for name in names:
            args += [name, deltas[name]]
        reply = self._run("finish", args)
        if not reply[0]:
            return False, {}
        return True, dict(zip(names, (int(v) for v in reply[1:]), strict=True))

    def reap(self) -> int:
        """Return every expired lease to its host queue (host freed); how many."""
        returned = 0
        while True:
            args = [self.prefix, repr(self._clock()), repr(self.default_delay), self.max_size,
                    self.window, REAP_BATCH]
            count = int(self._run("reap", args))
            returned += count
            if count < REAP_BATCH:
                return returned

    # -- spilled URLs come back ------------------------------------------------------------

    def refill(self, store: CrawlStore, max_hosts: int = REFILL_HOSTS,
               claim_seconds: float = 60.0) -> int:
        """Bring back the best spilled URLs of up to ``max_hosts`` hosts due a refill, from the
        crawl database (one query per host); how many were queued. Safe to run anywhere, any
        number of times at once: each host is claimed first, and a claim that is not
        completed (the caller died) lapses after ``claim_seconds``."""
        claimed = self._run("refill_claim", [self.prefix, repr(self._clock()),
                                             repr(claim_seconds), max_hosts, self.max_size,
                                             self.window])
        queued = 0
        for host, spilled in zip(claimed[::2], claimed[1::2], strict=True):
            host = _text(host)
            limit = self.window + REFILL_SLACK if self.window else REFILL_UNBOUNDED
            links = store.queued_links_of_host(urlsplit("//" + host).hostname or "", limit)
            args: list[Any] = [self.prefix, repr(self._clock()), self.max_size, self.window,
                               host, registered_domain(host), _text(spilled),
                               "1" if len(links) < limit else "0"]
            for link in links:
                task = link.to_task()
                if host_of(task.url) != host:  # the database's host has no port
                    continue
                args += [fingerprint(task.url), repr(float(task.priority)), task_json(task)]
            queued += int(self._run("refill_push", args))
        return queued

    def accounts_for(self, urls: Sequence[str]) -> list[bool]:
        """Per URL: whether the frontier will hand it out some day (queued, leased, or its host
        has spilled URLs to bring back). One pipelined round trip."""
        pipe = self.client.pipeline(transaction=False)
        for url in urls:
            host, fp = host_of(url), fingerprint(url)
            pipe.hexists(self.prefix + "t:" + host, fp)
            pipe.hexists(self.prefix + "lease", fp)
            pipe.hexists(self.prefix + "spill", host)
        answers = pipe.execute()
        return [any(answers[3 * i:3 * i + 3]) for i in range(len(urls))]

    # -- sizes -----------------------------------------------------------------------------

    def __len__(self) -> int:
        """URLs queued in Redis (not in flight, not spilled)."""
        return int(self.client.get(self.prefix + "queued") or 0)

    def counters(self) -> dict[str, int]:
        raw = self.client.hgetall(self.counters_key)
        return {_text(name): int(float(value)) for name, value in raw.items()}

    def in_flight(self) -> int:
        return int(self.client.hlen(self.prefix + "lease"))

    def hosts(self) -> int:
        """Hosts with queued URLs."""
        return int(self.client.zcard(self.prefix + "worst"))

    def next_ready_in(self) -> float | None:
        """Seconds until some host may be contacted (0 if one may now), None if no host waits.

        May be early: a sleeping host whose queue has emptied still counts."""
        answer = self._run("next_ready", [self.prefix, repr(self._clock())])
        return None if answer is None else float(_text(answer))

    def stats(self) -> dict[str, int]:
        """queued, in flight, hosts with URLs, evicted (spilled so far), seen, and hosts with
        spilled URLs (``spilled_hosts``)."""
        pipe = self.client.pipeline(transaction=False)
        for key in ("queued", "evicted", "seen_count"):
            pipe.get(self.prefix + key)
        pipe.hlen(self.prefix + "lease")
        pipe.zcard(self.prefix + "worst")
        pipe.hlen(self.prefix + "spill")
        queued, evicted, seen, in_flight, hosts, spilled = pipe.execute()
        return {"queued": int(queued or 0), "in_flight": int(in_flight), "hosts": int(hosts),
                "evicted": int(evicted or 0), "seen": int(seen or 0),
                "spilled_hosts": int(spilled)}

    # -- recovery --------------------------------------------------------------------------

    def rebuild(self, store: CrawlStore, batch: int = 5000) -> int:
        """Refill the frontier from the crawl database (the source of truth); the queued count.
        Drops every frontier key first (leases too: their URLs are still ``queued`` in the
        database, so they come back). See ``rebuild_from``."""
        return rebuild_from(self, store, batch)

    def clear(self) -> int:
        """Delete every key under the prefix (SCAN + UNLINK in batches); how many."""
        return delete_keys(self.client, scan_keys(self.client, glob_escape(self.prefix) + "*"))


class Rebuildable(Protocol):
    """A Redis frontier, one shard (``RedisFrontier``) or all of them (``ShardedFrontier``)."""

    def clear(self) -> int: ...
    def push_many(self, tasks: Sequence[CrawlTask]) -> list[bool]: ...
    def mark_seen(self, urls: Iterable[str]) -> int: ...
    def __len__(self) -> int: ...


def rebuild_from(frontier: Rebuildable, store: CrawlStore, batch: int = 5000) -> int:
    """A Redis frontier (one shard or every shard) rebuilt from the crawl database: cleared,
    every queued URL queued again, every known URL's fingerprint marked seen; the queued count."""
    frontier.clear()
    tasks: list[CrawlTask] = []
    for link in store.iter_links(LinkStatus.QUEUED, batch=batch):
        tasks.append(link.to_task())
        if len(tasks) >= batch:
            frontier.push_many(tasks)
            tasks = []
    frontier.push_many(tasks)
    urls: list[str] = []
    for url in store.iter_urls():
        urls.append(url)
        if len(urls) >= batch:
            frontier.mark_seen(urls)
            urls = []
    frontier.mark_seen(urls)
    return len(frontier)


_SCRIPTS = ("push", "mark_seen", "pop", "ready_best", "finish", "reap", "refill_claim",
            "refill_push", "next_ready", "best_priority", "lease_current", "renew")


def _push_args(task: CrawlTask, dedup: bool) -> list[Any]:
    priority = float(task.priority)
    if math.isnan(priority):
        raise ValueError(f"priority of {task.url!r} is NaN")
    fp = fingerprint(task.url)
    host = host_of(task.url)
    args: list[Any] = [host, registered_domain(host), fp, repr(priority), task_json(task)]
    if dedup:
        args.extend(seen_slot(fp))
    return args
