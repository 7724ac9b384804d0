"""Crawl settings: defaults < topic.toml < command-line flags, validated by name and type.

Every tunable of the crawler is a field here, so one topic directory is one reusable crawl
configuration. An unknown key or a value of the wrong type is a ``SettingsError`` naming the key.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints
from urllib.parse import urlsplit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_USER_AGENT = "jlse/0.1 (+https://github.com/jlse-crawler/jlse; focused crawler)"

PAGE_CLASSIFIERS = ("nb", "kde-nb", "vsm")
LINK_TEXT_MODELS = ("crawl", "samples")  # jlse's link-text model: see link_text_model
# seconds without a page started after which a "low" URL may start whatever low_priority_share
# says (the better URLs' hosts all wait long: robots.txt unavailable, a long Crawl-delay)
LOW_AFTER_IDLE = 5.0
WARC_MODES = ("off", "also", "only")
MAX_FRONTIER_SHARDS = 1024  # a dispatcher round and a status read touch every shard
MAX_FETCH_BATCH = 64  # URLs per fetch message: a batch runs within one task's time limit
DISCOVERY_OPERATORS = ("forward", "backward", "keyword", "related")  # docs/algorithms.md §3
DISCOVERY_CHOOSERS = ("ucb1", "random", *DISCOVERY_OPERATORS)  # an operator: that one always
SEARCH_DIRECT = "direct"  # search_proxy: never through a proxy

class SettingsError(ValueError):
    """A setting is unknown, has the wrong type or an impossible value."""


@dataclass
class Settings:
    # --- the crawl ---
    strategy: str = "auto"  # jlse when the topic has samples or keywords, else bfs
    max_pages: int = 1000  # fetched pages, robots.txt fetches not counted
    concurrency: int = 16  # fetch threads (embedded) / in-flight tasks (distributed)
    # embedded: a page in flight this long holds no budget or concurrency slot (another starts
    # in its place); when the budget is written, such pages are left queued for --resume
    straggler_seconds: float = 2.0
    # embedded: processes that fetch, parse and classify pages (-1: one per CPU core when there
    # are several; 0: threads of the crawl process, one core)
    page_processes: int = -1
    expand_targets: bool = False  # paper: target (detail) pages are not expanded
    # jlse: a relevant page's links to more of its section (a target's up-links, a listing's
    # next pages: workers/section_links.py) get at least this x its relevance; 0 = off
    section_links: float = 0.5
    hard_focus: bool = True  # focused strategies: irrelevant pages are not expanded
    relevance_threshold: float = 0.5  # P(relevant|page) at or above this is relevant
    # --- fetching ---
    user_agent: str = DEFAULT_USER_AGENT
    connect_timeout: float = 10.0
    read_timeout: float = 10.0
    fetch_deadline: float = 30.0  # total seconds for one fetch: connect, headers and body
    max_retries: int = 2  # on 5xx and connection errors; each retry waits in the frontier
    retry_backoff: float = 0.5  # seconds, doubled each retry (plus the host's delay)
    max_bytes: int = 2 * 1024 * 1024  # body cap, enforced while streaming
    max_decompressed_bytes: int = 8 * 1024 * 1024  # gzip-bomb guard
    max_redirects: int = 5
    proxy: str = ""  # overrides HTTP(S)_PROXY when set
    allow_private: bool = False  # allow loopback/private/link-local targets
    allowed_networks: list[str] = field(default_factory=list)  # CIDRs allowed despite the guard
    # --- politeness and robots.txt ---
    obey_robots: bool = True
    politeness_delay: float = 1.0  # minimum seconds between requests to one host
    host_concurrency: int = 1  # requests in flight per host (embedded; >1 needs delay 0)
    max_crawl_delay: float = 30.0  # Crawl-delay values above this are capped
    robots_cache_size: int = 1000
    robots_cache_ttl: float = 24 * 3600.0
    robots_retry_after: float = 60.0  # robots.txt 5xx/unreachable: host retried after this
    robots_unavailable_retries: int = 2  # then its URLs are given up (outcome robots_unavailable)
    robots_deadline: float = 5.0  # total seconds for one robots.txt fetch, redirects included
    # robots.txt fetches at once: the embedded crawl's, beside its page fetches (0 = 8 x
    # concurrency); a worker process's, in its fetch slots (0 = a quarter of concurrency)
    robots_slots: int = 0
    # --- scope and traps ---
    allowed_domains: list[str] = field(default_factory=list)  # empty = any host
    denied_domains: list[str] = field(default_factory=list)
    max_depth: int = 30
    max_url_length: int = 2048
    max_repeated_segments: int = 2  # a path segment seen more often than this is a trap
    max_pattern_run: int = 12  # ancestors in a row with the same URL pattern
    max_pages_per_host: int = 5000
    max_pages_per_domain: int = 10_000  # per registered domain (public-suffix list), all hosts
    max_hosts_per_domain: int = 20  # hosts fetched per registered domain; links to more refused
    max_query_variants: int = 25  # query strings of one host+path+keys a page of that shape
    # may add (links of a page to its own shape: the ?id= trap); the rest are refused
    max_links_per_page: int = 2000  # out-links kept per page (a spread over their hosts)
    max_page_tags: int = 50_000  # a page's HTML is cut after this many tags (memory bound)
    domain_diversity: int = 100  # k: any k consecutive pops from k different hosts (soft)
    # a URL below this share of the best queued priority is "low" (0.5 until 2026-11-26: the
    # real-text web's efficiency at 1,000 pages rose from 0.72-0.73 to 0.78-0.79 with 0.8)
    priority_slack: float = 0.8
    low_priority_slots: int = 1  # fetch slots that may take low URLs while better ones wait
    low_priority_share: float = 0.1  # low URLs: at most this share of the pages started
    frontier_size: int = 100_000  # URLs queued in memory (per shard in Redis); beyond it the
    # lowest wait in the crawl database (embedded: until a resume; distributed: until their host
    # drains, see host_window)
    opic_relevance_weight: float = 1.0  # opic: cash split in proportion to 1 + w * anchor sim
    # --- distributed mode (--frontier redis://...) ---
    max_outstanding: int = 0  # fetch tasks queued or running at once; 0 = 2 x concurrency
    # URLs per fetch message: a worker process fetches a message's URLs together and writes
    # their links in one transaction and their pages in another (1: a URL per message, one
    # page per transaction). Keep max_outstanding >= 2 x worker processes x fetch_batch.
    fetch_batch: int = 1
    lease_seconds: float = 30.0  # a popped URL returns to the frontier if no live worker has
    # started it by then (a running task's lease is renewed by its worker: worker_lease_seconds)
    worker_lease_seconds: float = 20.0  # a lease a live worker holds is renewed to this far
    # ahead every second (capped at lease_seconds): a dead worker's URLs come back this soon
    frontier_shards: int = 1  # Redis frontier shards, each owning the hosts of some domains
    host_window: int = 256  # URLs a host keeps in Redis (0: no limit); the rest wait in the
    # crawl database and come back, best first, as the host's window drains (256: a host's
    # queue and tasks stay compact listpacks, MEMORY_CONFIG in scheduler/redis_client.py)
    # --- page classifier / topic model ---
    page_classifier: str = "nb"  # nb: multinomial NB, kde-nb: kernel-density NB, vsm: keywords
    # nb with keywords: refit the NB on the crawl's pages that it and the keywords agree on
    self_training: bool = True
    balance_scripts: bool = True  # nb: samples weighted to the same share of Chinese pages per class
    store_pages: bool = True  # keep raw pages in the page repository (md5(url) names)
    # --- outputs (WARC files, sitemaps, metrics) ---
    warc: str = "off"  # off | also (WARC files and the page repository) | only (WARC files)
    warc_max_bytes: int = 1_000_000_000  # a WARC file is closed and a new one begun past this
    # distributed crawl: each worker appends its responses to WARC files in the shared page
    # store ($JLSE_PAGES_STORE, default ./pages-store), located per page in the crawl database
    pages_store: bool = True
    sitemaps: bool = False  # read the Sitemap: files of each host's robots.txt for URLs
    sitemap_max_urls: int = 10_000  # URLs taken from one host's sitemaps
    sitemap_max_files: int = 10  # sitemap files (index included) read per host
    metrics_port: int = 0  # embedded crawl: Prometheus metrics on 127.0.0.1:PORT (0 = off)
    # --- JLSE learner (docs/algorithms.md §1) ---
    cf: int = 150
    gamma: float = 0.9
    reward: float = 1.0
    anchor_floor: float = 0.01
    context_distance: int = 5  # delta
    bm25_k1: float = 2.0
    bm25_b: float = 0.75
    field_weights: list[float] = field(default_factory=lambda: [0.5, 0.2, 0.3])
    tunnel_weight: float = 0.0  # jlse: the relevance a page judged irrelevant passes on
    # jlse: a link's priority x (1 - w + w x P(relevant | its anchor + context)); 0 = off; 1 (the
    # default): x P(relevant | its anchor + context) itself (0.7 until issue 27's fourth round)
    link_text_weight: float = 1.0
    # jlse: the link-text model t(i): crawl = the page classifier as self-training refits it on
    # the crawl's pages, read on each link's anchor text (the samples' model for a topic without
    # self-training); samples = a KDE-NB of the sample pages on anchor + context (until issue
    # 27's seventh round)
    link_text_model: str = "crawl"
    # jlse: a page judged relevant passes r ** relevance_exponent to its links (1 = r itself)
    relevance_exponent: float = 4.0
    # jlse: the optimism c of the site bandit (models/site_harvest.py: a link to another site
    # x its site's and its link group's learnt lift; target pages' off-site links probed);
    # below 0: no site bandit (docs/strategies.md, "The site bandit": why it is on)
    site_optimism: float = 0.3
    # jlse: a link's priority x its URL shape's pages per request, a redirect counting 1/2
    # (its target: a second request) or 0 (a target already known) (models/redirect_waste.py)
    redirect_waste: bool = True
    # jlse: a link's priority x its URL shape's share of pages judged relevant over the
    # crawl's, learnt during the crawl, on the hosts that gave a relevant page (models/shape_harvest.py)
    shape_harvest: bool = True
    # jlse: a relevant page's link to the home page of a site the crawl has not entered is
    # ranked by the page's weight x what the site bandit expects of it, not by its anchor
    site_entries: bool = True
    # jlse: an irrelevant page's link to the home page of a site the crawl has not entered is
    # ranked by the share of relevant pages such links have led to x what the bandit expects
    # of the site, within the tunnel group's share (tunnel_off_site)
    tunnel_entries: bool = True
    # jlse: a relevant page's links x max(1, its site's new relevant sites per page over the
    # crawl's) ** 0.5: the pages that led to new relevant sites (a portal) are read further
    # (models/site_harvest.py; on: more relevant sites on comp, .005-.008 less harvest on newswire)
    site_discovery: bool = False
    # jlse: a relevant page's link to a site with no page judged relevant yet is not lowered by
    # the site's harvest, held to low_priority_share of the pages fetched (models/site_harvest.py;
    # off: more relevant sites on some topics, .002-.007 less harvest on newswire)
    site_prospects: bool = False
    # jlse: the link-text evidence also learns from the crawl's own outcomes, which followed
    # links' anchors led to relevant pages (models/link_outcomes.py; off: no gain measured)
    link_outcomes: bool = False
    # jlse: a link whose anchor names a page already judged (its title's first words) is ranked
    # by that page's weight, not by its evidence and harvest lifts (models/known_titles.py)
    known_titles: bool = True
    # jlse: an irrelevant page's links to other sites join the site bandit as a link group of
    # their own, held to low_priority_share of the pages fetched (models/site_harvest.py)
    tunnel_off_site: bool = True
    dead_end_vertices: bool = True  # jlse: fetched pages on no path to a result join G_w, Q = 0
    link_search_postings: list[int] = field(default_factory=lambda: [1024, 1024, 4])  # per field
    link_search_rescore: int = 4  # candidates re-ranked exactly per link
    # --- context-graph crawler (cfc; embedded mode) ---
    cfc_layers: int = 3  # context layers above the targets' layer 0 (then "other")
    cfc_page_log: int = 20_000  # pages kept (a uniform sample) to learn the layers from
    # --- domain discovery (jlse discover; docs/algorithms.md §3) ---
    discovery_chooser: str = "ucb1"  # ucb1 | random | one operator: forward, backward, ...
    discovery_top_k: int = 10  # top pages that seed the next round's operator
    discovery_round_pages: int = 50  # pages fetched per round at most
    discovery_alpha: float = 0.2  # weight of PageRank's position in the combined ranking
    discovery_seed_sites: int = 20  # sites `--seeds-out` writes (best first)
    discovery_home_pages: bool = True  # fetch each site's home page; a site ranks no higher than it
    search_rate: float = 1.0  # search requests per second at most
    search_retries: int = 2  # more tries of a search answering 5xx or unreachable
    # "": HTTP(S)_PROXY / NO_PROXY (a loopback search URL always direct); "direct"; a proxy URL
    search_proxy: str = ""
    # --- topic description (topic.toml) ---
    name: str = ""
    keywords: list[str] = field(default_factory=list)

    def validate(self) -> Settings:
        """Check values that have the right type but an impossible value."""
        for key in ("max_pages", "concurrency", "max_bytes", "max_decompressed_bytes",
                    "frontier_size", "max_url_length", "robots_cache_size", "cf",
                    "domain_diversity", "max_pages_per_host", "low_priority_slots",
                    "host_concurrency", "cfc_layers", "cfc_page_log", "max_pages_per_domain",
                    "max_hosts_per_domain", "max_query_variants", "max_links_per_page",
                    "max_page_tags", "fetch_batch"):
            if getattr(self, key) < 1:
                raise SettingsError(f"{key}: must be at least 1, got {getattr(self, key)}")
        for key in ("connect_timeout", "read_timeout", "fetch_deadline", "straggler_seconds",
                    "robots_deadline"):
            if getattr(self, key) <= 0:
                raise SettingsError(f"{key}: must be positive, got {getattr(self, key)}")
        for key in ("politeness_delay", "max_crawl_delay", "retry_backoff", "max_retries",
                    "max_depth", "max_redirects", "robots_slots"):
            if getattr(self, key) < 0:
                raise SettingsError(f"{key}: must not be negative, got {getattr(self, key)}")
        if self.host_concurrency > 1 and self.politeness_delay > 0:
            raise SettingsError("host_concurrency: more than 1 request per host is for servers "
                                "you run; it needs politeness_delay=0")
        if self.page_processes < -1:
            raise SettingsError(f"page_processes: -1 (one per core), 0 (threads) or a count, "
                                f"got {self.page_processes}")
        if not 1 <= self.frontier_shards <= MAX_FRONTIER_SHARDS:
            raise SettingsError(f"frontier_shards: 1 to {MAX_FRONTIER_SHARDS}, got "
                                f"{self.frontier_shards}")
        if self.host_window < 0:
            raise SettingsError(f"host_window: 0 (no limit) or a count, got {self.host_window}")
        if self.fetch_batch > MAX_FETCH_BATCH:
            raise SettingsError(f"fetch_batch: at most {MAX_FETCH_BATCH}, got {self.fetch_batch}")
        if self.max_outstanding < 0:
            raise SettingsError(f"max_outstanding: must not be negative, got {self.max_outstanding}")
        if self.lease_seconds < 5:  # shorter than a slow fetch: leases would expire mid-task
            raise SettingsError(f"lease_seconds: must be at least 5, got {self.lease_seconds}")
        if self.worker_lease_seconds < 5:  # a few missed heartbeats must not end a lease
            raise SettingsError("worker_lease_seconds: must be at least 5, got "
                                f"{self.worker_lease_seconds}")
        if self.cfc_layers > 10:
            raise SettingsError(f"cfc_layers: at most 10, got {self.cfc_layers}")
        if self.max_url_length > 2500:  # PostgreSQL's unique index on url holds ~2,700 bytes
            raise SettingsError("max_url_length: at most 2500")
        for key in ("relevance_threshold", "priority_slack", "tunnel_weight",
                    "low_priority_share", "section_links", "link_text_weight"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise SettingsError(f"{key}: must lie in [0, 1], got {getattr(self, key)}")
        if self.site_optimism > 1.0:
            raise SettingsError(f"site_optimism: at most 1 (below 0: off), got {self.site_optimism}")
        if not 1.0 <= self.relevance_exponent <= 64.0:
            raise SettingsError(f"relevance_exponent: must lie in [1, 64], got {self.relevance_exponent}")
        if self.warc not in WARC_MODES:
            raise SettingsError(f"warc: one of {', '.join(WARC_MODES)}, got {self.warc!r}")
        self._validate_discovery()
        for key in ("warc_max_bytes", "sitemap_max_urls", "sitemap_max_files"):
            if getattr(self, key) < 1:
                raise SettingsError(f"{key}: must be at least 1, got {getattr(self, key)}")
        if not 0 <= self.metrics_port <= 65535:
            raise SettingsError(f"metrics_port: 0 (off) or a TCP port, got {self.metrics_port}")
        if self.link_text_model not in LINK_TEXT_MODELS:
            raise SettingsError(f"link_text_model: one of {', '.join(LINK_TEXT_MODELS)}, "
                                f"got {self.link_text_model!r}")
        if self.page_classifier not in PAGE_CLASSIFIERS:
            raise SettingsError(f"page_classifier: unknown {self.page_classifier!r}; "
                                f"available: {', '.join(PAGE_CLASSIFIERS)}")
        for key in ("field_weights", "link_search_postings"):
            if len(getattr(self, key)) != 3:
                raise SettingsError(f"{key}: needs three values (anchor, url, context)")
        if min(self.link_search_postings) < 1 or self.link_search_rescore < 1:
            raise SettingsError("link_search_postings / link_search_rescore: must be at least 1")
        return self

    def _validate_discovery(self) -> None:
        if self.discovery_chooser not in DISCOVERY_CHOOSERS:
            raise SettingsError(f"discovery_chooser: one of {', '.join(DISCOVERY_CHOOSERS)}, "
                                f"got {self.discovery_chooser!r}")
        for key in ("discovery_top_k", "discovery_round_pages", "discovery_seed_sites"):
            if getattr(self, key) < 1:
                raise SettingsError(f"{key}: must be at least 1, got {getattr(self, key)}")
        if not 0.0 <= self.discovery_alpha <= 1.0:
            raise SettingsError(f"discovery_alpha: must lie in [0, 1], got {self.discovery_alpha}")
        if self.search_rate <= 0 or self.search_retries < 0:
            raise SettingsError("search_rate: must be positive; search_retries: not negative")
        _validate_search_proxy(self.search_proxy)

    def replace(self, **changes: Any) -> Settings:
        return apply_overrides(self, changes, source="override")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def non_defaults(self) -> dict[str, Any]:
        """The settings whose value is not the default, by name."""
        defaults = Settings().to_dict()
        return {key: value for key, value in self.to_dict().items() if value != defaults[key]}


def _validate_search_proxy(value: str) -> None:
    if value in ("", SEARCH_DIRECT):
        return
    parts = urlsplit(value)
    try:
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number
        valid = False
    if not valid:  # the value is not shown: a proxy URL may hold a password
        raise SettingsError('search_proxy: "" (HTTP(S)_PROXY and NO_PROXY), "direct" or an '
                            "http(s)://HOST:PORT proxy URL")


_HINTS = get_type_hints(Settings)


def _coerce(key: str, value: Any, source: str) -> Any:
    """Return ``value`` as the type of setting ``key``, or raise a SettingsError naming it."""
    hint = _HINTS[key]
    where = f"{key} (from {source})"
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise SettingsError(f"{where}: expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, bool):
            raise SettingsError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                pass
        raise SettingsError(f"{where}: expected an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise SettingsError(f"{where}: expected a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise SettingsError(f"{where}: expected a string, got {value!r}")
    # list[str] / list[float]
    item_type = hint.__args__[0]
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list):
        raise SettingsError(f"{where}: expected a list, got {value!r}")
    try:
        return [item_type(v) if not isinstance(v, bool) else _bad() for v in value]
    except (TypeError, ValueError):
        raise SettingsError(f"{where}: expected a list of {item_type.__name__}, got {value!r}") from None


def _bad() -> Any:
    raise TypeError


def apply_overrides(base: Settings, overrides: dict[str, Any], source: str) -> Settings:
    """A copy of ``base`` with ``overrides`` applied; dashes in keys are read as underscores."""
    changes = {}
    for raw_key, value in overrides.items():
        key = raw_key.replace("-", "_")
        if key not in _HINTS:
            raise SettingsError(f"{raw_key} (from {source}): unknown setting")
        changes[key] = _coerce(key, value, source)
    return dataclasses.replace(base, **changes).validate()


def load_toml(path: Path) -> dict[str, Any]:
    """Read topic.toml as a flat dict; a ``[crawl]``-style table is flattened into its keys."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark is fine
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path}: not UTF-8 text (offset {exc.start}); save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML: {exc}") from None
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(value)
        else:
            flat[key] = value
    return flat


def command_overrides(pairs: list[str] | None, flags: dict[str, Any]) -> dict[str, Any]:
    """``--set key=value`` pairs, then the flags given explicitly (a flag left unset, None,
    keeps ``--set``'s value), checked at once: a wrong key or type is an error naming the key."""
    overrides: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"--set {pair!r}: expected key=value")
        overrides[key.strip()] = value.strip()  # typed by the validator
    overrides.update({key: value for key, value in flags.items() if value is not None})
    load_settings(None, overrides)
    return overrides


def load_settings(topic_toml: Path | None = None, cli: dict[str, Any] | None = None) -> Settings:
    """Defaults, then ``topic.toml`` (if it exists), then CLI flags (``None`` values ignored)."""
    settings = Settings()
    if topic_toml is not None and topic_toml.exists():
        settings = apply_overrides(settings, load_toml(topic_toml), source=str(topic_toml))
    cli_values = {k: v for k, v in (cli or {}).items() if v is not None}
    return apply_overrides(settings, cli_values, source="command line")
