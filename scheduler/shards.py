"""A distributed crawl's frontier in shards: which shard owns a host, and the shard's key names.

A crawl runs on ``frontier_shards`` shards (1 by default). A shard owns its hosts' queues,
politeness, leases, dedup, host ledger and counters, so every step of the hot path (push, pop,
ack, the checks before a fetch) touches one shard only. A host belongs to the shard of its
registered domain: a domain's hosts share one shard, so the per-domain figures (pages, hosts
fetched: the trap filter) and domain diversity stay local to it.

Every key of a shard starts with its prefix, which carries a Redis Cluster hash tag,
``{<crawl id>.<shard>}``: all of a shard's keys sit in one slot, so its Lua scripts run on a
cluster, and the shards spread over the cluster's masters. The same names work on one plain
Redis.
"""

from __future__ import annotations

import functools
import hashlib

from jlse.scheduler.urls import registered_domain


@functools.lru_cache(maxsize=65536)
def shard_of_domain(domain: str, shards: int) -> int:
    """The shard (0 .. shards - 1) owning a registered domain: a stable hash, so every process
    of every machine agrees."""
    if shards <= 1:
        return 0
    digest = hashlib.blake2b(domain.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def shard_of(host: str, shards: int) -> int:
    """The shard owning ``host`` (that of its registered domain)."""
    if shards <= 1:
        return 0
    return shard_of_domain(registered_domain(host.lower()), shards)


def shard_diversity(diversity: int, shards: int) -> int:
    """A shard's domain-diversity window (``domain_diversity``'s k): a shard makes about one
    pop in ``shards`` of the crawl's, so k / shards of its pops span about k of the crawl's,
    and a domain's hosts all live in its shard. 1 (off) stays 1."""
    return max(1, -(-diversity // max(shards, 1)))


def shard_prefix(crawl_prefix: str, crawl_id: str, shard: int) -> str:
    """The prefix of every key of one shard of a crawl: the crawl's prefix plus a hash tag."""
    return f"{crawl_prefix}{{{crawl_id}.{shard}}}:"
