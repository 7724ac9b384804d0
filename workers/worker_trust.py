"""What a worker takes from the crawl config in Redis, and what only from its own environment.

Redis is shared by every machine of a cluster, so its contents are input, not orders. A worker
(fetch or learner) builds a crawl's context from the registered config with these rules:

* **Its own environment decides** where its database is and who it logs in as
  (``DATABASE_URL``: host, port, user, parameters; the password from ``PGPASSWORD`` or
  ``~/.pgpass``), its proxy (``JLSE_PROXY``) and its address guard (``JLSE_ALLOW_PRIVATE``,
  ``JLSE_ALLOWED_NETWORKS``). Nothing in Redis changes them.
* **The config may choose**, on that server, the database name and the schema
  (``options=-csearch_path=NAME``), each a plain name, so one pool of workers serves crawls in
  several databases; every other part of the registered store URL is ignored.
* **The config must agree** with the worker on the rest: a registered store URL on another
  server, or (for fetching) a proxy or guard setting other than the worker's, makes the worker
  refuse the crawl (``UntrustedConfig``, logged with the reason) rather than follow it.
* **Everything else is validated**: only known keys of the right types, settings through
  ``jlse.settings`` (names, types, ranges) and below the worker's resource ceilings
  (``WORKER_LIMITS``). The topic model and Q-tables are raw arrays read without pickle.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from jlse.redact import redact_url, strip_credentials
from jlse.scheduler.crawl_registry import RegistryError, settings_from_config
from jlse.settings import Settings, SettingsError

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/jlse"
LOCAL_SETTINGS = ("proxy", "allow_private", "allowed_networks")  # the worker's own
CONFIG_TYPES: dict[str, type | tuple[type, ...]] = {
    "crawl_id": str, "topic": str, "settings": dict, "store_url": str, "seeds": list,
    "max_pages": int, "status": str, "reason": str, "created_at": (int, float),
    "classified": bool,
}
# Ceilings on what a config may ask of a worker's memory and time (a task has 120 s).
WORKER_LIMITS: dict[str, float] = {
    "max_bytes": 64 * 1024 * 1024, "max_decompressed_bytes": 256 * 1024 * 1024,
    "fetch_deadline": 100.0, "robots_deadline": 60.0, "connect_timeout": 60.0,
    "read_timeout": 60.0, "max_links_per_page": 100_000, "max_page_tags": 1_000_000,
    "max_url_length": 2500,
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$-]{0,62}")
_SEARCH_PATH = re.compile(r"-c\s*search_path\s*=\s*([A-Za-z_][A-Za-z0-9_$]{0,62})")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


class UntrustedConfig(RegistryError):
    """A crawl config a worker refuses to follow (the reason is the message)."""


@dataclass(frozen=True)
class WorkerEnvironment:
    """What a worker knows from its own environment."""

    database_url: str
    proxy: str
    allow_private: bool
    allowed_networks: tuple[str, ...]

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> WorkerEnvironment:
        env = os.environ if environ is None else environ
        allow = env.get("JLSE_ALLOW_PRIVATE", "").strip().lower()
        if allow not in _TRUE + _FALSE:
            raise UntrustedConfig(f"JLSE_ALLOW_PRIVATE: expected true or false, got {allow!r}")
        networks = env.get("JLSE_ALLOWED_NETWORKS", "")
        return cls(database_url=env.get("DATABASE_URL") or DEFAULT_DATABASE_URL,
                   proxy=env.get("JLSE_PROXY", "").strip(), allow_private=allow in _TRUE,
                   allowed_networks=tuple(n.strip() for n in networks.split(",") if n.strip()))


@dataclass(frozen=True)
class TrustedConfig:
    """A crawl config as a worker uses it."""

    settings: Settings  # with the worker's own proxy and address guard
    store_url: str  # the worker's database URL, with the crawl's database name and schema
    fetch_refusal: str = ""  # why this worker must not fetch for the crawl ("" if it may)

    def check_fetching(self) -> None:
        """Raise UntrustedConfig if the crawl's proxy or guard settings are not the worker's
        (a learner, which fetches nothing, does not need them)."""
        if self.fetch_refusal:
            raise UntrustedConfig(self.fetch_refusal)


def trusted_config(config: Any, env: WorkerEnvironment) -> TrustedConfig:
    """The settings and database URL a worker uses for ``config`` (read from Redis);
    UntrustedConfig when it refuses the crawl."""
    check_config_shape(config)
    try:
        registered = settings_from_config(config)
    except SettingsError as exc:
        raise UntrustedConfig(f"invalid settings: {exc}") from None
    _check_limits(registered)
    settings = dataclasses.replace(registered, proxy=env.proxy, allow_private=env.allow_private,
                                   allowed_networks=list(env.allowed_networks))
    return TrustedConfig(settings, database_url(config["store_url"], env.database_url),
                         _local_settings_mismatch(config["settings"], env))


def check_config_shape(config: Any) -> None:
    """Only known keys, each of its type."""
    if not isinstance(config, dict):
        raise UntrustedConfig("the config is not a JSON object")
    for key, value in config.items():
        expected = CONFIG_TYPES.get(key)
        if expected is None:
            raise UntrustedConfig(f"unknown config key {key!r}")
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise UntrustedConfig(f"config key {key!r} has the wrong type")
    for key in ("settings", "store_url"):
        if key not in config:
            raise UntrustedConfig(f"config key {key!r} is missing")


def database_url(registered: str, own: str) -> str:
    """The worker's own database URL (``own``) with the database name and schema of the
    crawl's ``registered`` URL; UntrustedConfig if it names another server or bad names."""
    reg, mine = urlsplit(registered), urlsplit(own)
    if not reg.scheme.startswith("postgres") or not mine.scheme.startswith("postgres"):
        raise UntrustedConfig(f"the crawl database {redact_url(registered)!r} is not PostgreSQL")
    if _server(reg) != _server(mine):
        raise UntrustedConfig(
            f"the crawl's database server {_show_server(reg)} is not this worker's "
            f"({_show_server(mine)}, from DATABASE_URL); a worker connects only to its own")
    name = unquote(reg.path.lstrip("/")) or unquote(mine.path.lstrip("/"))
    if not _NAME.fullmatch(name):
        raise UntrustedConfig(f"database name {name!r} is not a plain name")
    query = [(k, v) for k, v in parse_qsl(mine.query, keep_blank_values=True) if k != "options"]
    own_options = dict(parse_qsl(mine.query)).get("options", "")
    schema = _search_path(reg.query)
    options = " ".join(part for part in (own_options, schema and f"-csearch_path={schema}")
                       if part)
    if options:
        query.append(("options", options))
    return mine._replace(path="/" + quote(name), query=urlencode(query, quote_via=quote)).geturl()


def _search_path(query: str) -> str:
    """The schema of a registered URL's ``options=-csearch_path=NAME`` ("" if none); any
    other option is not taken from Redis."""
    options = dict(parse_qsl(query)).get("options", "")
    if not options:
        return ""
    match = _SEARCH_PATH.fullmatch(options.strip())
    if match is None:
        raise UntrustedConfig(f"store URL options {options!r}: only -csearch_path=NAME is "
                              "taken from a crawl's registration")
    return match.group(1)


def _server(parts: Any) -> tuple[str, int]:
    try:
        port = parts.port or 5432
    except ValueError:
        raise UntrustedConfig("the crawl's database URL has an invalid port") from None
    return ((parts.hostname or "").lower(), port)


def _show_server(parts: Any) -> str:
    host, port = _server(parts)
    return f"{host or '(local socket)'}:{port}"


def _check_limits(settings: Settings) -> None:
    for key, ceiling in WORKER_LIMITS.items():
        value = getattr(settings, key)
        if value > ceiling:
            raise UntrustedConfig(f"{key} = {value} is above this worker's limit of {ceiling}")


def _local_settings_mismatch(registered: dict[str, Any], env: WorkerEnvironment) -> str:
    """Why the crawl's proxy and guard settings are not the worker's own ("" if they are;
    compared without credentials: the config never holds them)."""
    mine = {"proxy": strip_credentials(env.proxy), "allow_private": env.allow_private,
            "allowed_networks": sorted(env.allowed_networks)}
    wanted = {"proxy": strip_credentials(str(registered.get("proxy", ""))),
              "allow_private": bool(registered.get("allow_private", False)),
              "allowed_networks": sorted(map(str, registered.get("allowed_networks", [])))}
    names = {"proxy": "JLSE_PROXY", "allow_private": "JLSE_ALLOW_PRIVATE",
             "allowed_networks": "JLSE_ALLOWED_NETWORKS"}
    for key in LOCAL_SETTINGS:
        if wanted[key] != mine[key]:
            return (f"the crawl asks for {key} = {wanted[key]!r}, this worker has "
                    f"{mine[key]!r} (from {names[key]}); a worker's {key} comes from its own "
                    "environment")
    return ""
