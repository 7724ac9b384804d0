"""Exit codes of the ``jlse`` command, and every error shown as one line (no traceback).

| code | meaning |
|------|---------|
| 0    | done |
| 1    | internal error: a bug (``-v`` shows the traceback) |
| 2    | usage: a bad option, setting, topic directory or input file |
| 3    | unavailable: PostgreSQL, Redis, a port, a file or an optional extra the command needs |
| 4    | the crawl fetched nothing: no seed host could be reached |
| 130  | interrupted (Ctrl+C) |
"""

from __future__ import annotations

import sys

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130

# Packages that only the `distributed` extra installs (pyproject.toml optional-dependencies).
DISTRIBUTED_PACKAGES = frozenset({"redis", "celery", "kombu", "billiard", "psycopg2", "flower"})
DISTRIBUTED_EXTRA_HINT = "pip install 'jlse[distributed]'"


class UnavailableError(RuntimeError):
    """Something the command needs is not there: a service, a port, a file (exit 3)."""


def _usage_types() -> tuple[type[BaseException], ...]:
    """Bad input. Each module's error is looked up only if the module was imported: importing
    them (and redis) up front would slow every command's start."""
    return (ValueError, *_loaded("jlse.run", "CrawlSetupError"),
            *_loaded("jlse.scheduler.crawl_registry", "RegistryError"))


def _loaded(module: str, *names: str) -> tuple[type[BaseException], ...]:
    """Exception classes of ``module`` if it was imported (never imports it)."""
    loaded = sys.modules.get(module)
    return tuple(getattr(loaded, name) for name in names) if loaded is not None else ()


def _service_message(exc: BaseException) -> str | None:
    """One line for a service that cannot be reached; None when ``exc`` is not such an error."""
    redis_errors = _loaded("redis.exceptions", "ConnectionError", "TimeoutError")
    if redis_errors and isinstance(exc, redis_errors):
        return f"cannot reach Redis: {_first_line(exc)} (is it running? check --frontier or REDIS_URL)"
    broker_errors = _loaded("kombu.exceptions", "OperationalError")
    if broker_errors and isinstance(exc, broker_errors):
        return f"cannot reach the Celery broker: {_first_line(exc)}"
    store_errors = _loaded("jlse.scheduler.store.base", "StoreError")
    if store_errors and isinstance(exc, store_errors):
        return _first_line(exc)
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _os_message(exc: OSError) -> str:
    """``PATH: reason`` for a file error, else the system's message."""
    reason = exc.strerror or _first_line(exc)
    return f"{exc.filename}: {reason}" if exc.filename else reason


def explain(exc: BaseException) -> tuple[int, str]:
    """The exit code and the one line a user sees for ``exc``."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in DISTRIBUTED_PACKAGES:
        return EXIT_UNAVAILABLE, (f"this needs the '{exc.name}' package of distributed mode: "
                                  f"{DISTRIBUTED_EXTRA_HINT}")
    if isinstance(exc, UnavailableError):
        return EXIT_UNAVAILABLE, _first_line(exc)
    service = _service_message(exc)
    if service is not None:
        return EXIT_UNAVAILABLE, service
    if isinstance(exc, OSError):
        return EXIT_UNAVAILABLE, _os_message(exc)
    if isinstance(exc, _usage_types()):
        return EXIT_USAGE, _first_line(exc)
    return EXIT_INTERNAL, (f"internal error: {type(exc).__name__}: {_first_line(exc)} "
                           "(run with -v for the traceback, and please report it)")
