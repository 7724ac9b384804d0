"""Redis clients for the frontier: one plain Redis or a Redis Cluster, chosen by the URL.

``redis://host:port/db`` (or ``rediss://``) is one Redis server; ``redis+cluster://host:port``
(``rediss+cluster://`` with TLS) is a Redis Cluster reached through any of its nodes. The
frontier's code is the same on both: every Lua script declares its key and touches one slot
(``scheduler.shards``). What differs is handled here: a cluster cannot delete keys of several
slots in one command, nor run scripts in a pipeline.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

log = logging.getLogger(__name__)
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
# What a shard whose server is down or failing over raises: its hosts wait, the rest go on.
UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterError,
               redis.exceptions.TryAgainError, redis.exceptions.RedisClusterException)
DELETE_BATCH = 1000
CLUSTER_RETRIES, CLUSTER_RETRY_CAP = 2, 0.2  # a call to a dead master fails within ~0.3 s


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def connect(url: str) -> Any:
    """A binary-safe client (models and Q-tables are bytes) of the Redis or cluster at ``url``."""
    scheme, _, rest = url.partition("://")
    plain = CLUSTER_SCHEMES.get(scheme.lower())
    if plain is not None:  # fail fast on a dead master: its shard waits, the others go on
        retry = Retry(ExponentialBackoff(cap=CLUSTER_RETRY_CAP, base=0.02), CLUSTER_RETRIES)
        return RedisCluster.from_url(f"{plain}://{rest}", socket_connect_timeout=2,
                                     retry=retry)
    return redis.Redis.from_url(url, socket_connect_timeout=5, health_check_interval=30)


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


def delete_keys(client: Any, keys: Iterable[bytes | str]) -> int:
    """UNLINK ``keys`` in batches (one slot per command on a cluster); how many existed."""
    if not is_cluster(client):
        batch: list[bytes | str] = []
        deleted = 0
        for key in keys:
            batch.append(key)
            if len(batch) >= DELETE_BATCH:
                deleted += client.unlink(*batch)
                batch = []
        return deleted + (client.unlink(*batch) if batch else 0)
    by_slot: dict[int, list[bytes | str]] = defaultdict(list)
    for key in keys:
        by_slot[client.keyslot(key)].append(key)
    return sum(client.unlink(*same[i:i + DELETE_BATCH])
               for same in by_slot.values() for i in range(0, len(same), DELETE_BATCH))


def scan_keys(client: Any, pattern: str) -> list[bytes]:
    """Every key matching ``pattern`` (every master of a cluster)."""
    if is_cluster(client):
        return list(client.scan_iter(match=pattern, count=1000,
                                     target_nodes=RedisCluster.PRIMARIES))
    return list(client.scan_iter(match=pattern, count=1000))


def replicas(client: Any) -> int:
    """Replicas each master has (the fewest of any master of a cluster; 0 if unknown)."""
    try:
        if is_cluster(client):
            infos = client.info("replication", target_nodes=RedisCluster.PRIMARIES)
            if "role" in infos:  # a cluster of one master: redis-py returns its reply alone
                infos = {"master": infos}
            counts = [int(info.get("connected_slaves", 0)) for info in infos.values()]
            return min(counts) if counts else 0
        return int(client.info("replication").get("connected_slaves", 0))
    except redis.RedisError:
        return 0


def node_client(client: Any, key: str) -> Any:
    """A client of the one server holding ``key`` (itself for a plain Redis): a pipeline on it
    runs on one connection, which WAIT needs."""
    if is_cluster(client):
        return client.get_redis_connection(client.get_node_from_key(key))
    return client


def glob_escape(text: str) -> str:
    """``text`` as a literal in a SCAN pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


MEMORY_CONFIG = {  # see docs/distributed.md: what keeps a queued and a known URL small
    "set-max-intset-entries": 4096,  # dedup fingerprints stay 8 bytes each
    "hash-max-listpack-value": 1024,  # a host's task JSONs stay in one compact listpack
    "hash-max-listpack-entries": 512,
    "zset-max-listpack-entries": 256,  # a host's queue of up to 256 URLs stays compact too
}


def ensure_memory_config(client: Any) -> None:
    """Raise Redis's compact-encoding limits the frontier relies on to ``MEMORY_CONFIG`` where
    they are lower (every node of a cluster); where CONFIG is disabled (a managed Redis), say
    what to set."""
    for name, wanted in MEMORY_CONFIG.items():
        try:
            current = {_text(k): _text(v) for k, v in _config_get(client, name).items()}
            if int(current.get(name, wanted)) < wanted:
                _config_set(client, name, wanted)
        except redis.ResponseError:
            log.warning("cannot read or set Redis %s: set it to %d or more (a frontier of "
                        "many URLs then takes several times the memory)", name, wanted)
            return


def _config_get(client: Any, name: str) -> dict:
    if is_cluster(client):  # the same value on every node (the project's files set them)
        return client.config_get(name, target_nodes=client.get_random_node())
    return client.config_get(name)


def _config_set(client: Any, name: str, value: int) -> None:
    if is_cluster(client):
        client.config_set(name, value, target_nodes=client.ALL_NODES)
    else:
        client.config_set(name, value)


def warn_unless_noeviction(client: Any) -> None:
    try:
        reply = _config_get(client, "maxmemory-policy")
    except redis.ResponseError:  # CONFIG disabled (managed Redis): cannot check
        return
    policy = {_text(k): _text(v) for k, v in reply.items()}.get("maxmemory-policy")
    if policy is not None and policy != "noeviction":
        log.warning("Redis maxmemory-policy is %r: the frontier needs 'noeviction', or "
                    "evicted keys lose URLs silently", policy)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
