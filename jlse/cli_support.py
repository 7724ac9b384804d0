"""How the ``jlse`` command looks and talks: help format, version, terminal log, output pipe."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, NoReturn

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Loggers with a line per fetch or host: crawl.log has them; the terminal only with INFO.
PER_PAGE_LOGGERS = ("jlse.workers.fetcher", "jlse.scheduler.robots")


class Parser(argparse.ArgumentParser):
    """A usage error is one line, pointing at the help (not argparse's usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see: {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: X)" after an option's help, unless it has no default to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False, []) or "default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


class StrategyNames:
    """The strategy names in an option's help (``%(names)s``): looked up only when the help is
    shown, so every other command starts without importing the models."""

    def __str__(self) -> str:
        from jlse.models.strategy_catalog import available_strategies

        return ", ".join(available_strategies())


def strategy_option(parser: argparse.ArgumentParser, flag: str, text: str) -> None:
    """``flag`` with ``text`` (which names ``%(names)s``) as its help."""
    action = parser.add_argument(flag, help=text)
    action.names = StrategyNames()  # type: ignore[attr-defined]  # argparse's help % vars(action)


def version() -> str:
    """The installed jlse's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("jlse")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def describe_commands(sub: Any) -> None:
    """Every subcommand: its one-line help as its description, and defaults in its help."""
    for action in sub._choices_actions:  # argparse keeps each subcommand's help only here
        command = sub.choices[action.dest]
        command.formatter_class = HelpFormatter
        command.description = command.description or action.help


def port_number(text: str) -> int:
    """A TCP port number (0: any free port), for argparse."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535, got {port}")
    return port


def _for_terminal(record: logging.LogRecord) -> bool:
    """Our own warnings, without the per-page ones; every library's errors."""
    if record.levelno >= logging.ERROR:
        return True
    return record.name.startswith("jlse") and not record.name.startswith(PER_PAGE_LOGGERS)


def log_to_terminal(level_name: str) -> None:
    """Terminal at ``level_name``: at WARNING and above, jlse's own records but not each
    page's fetch outcome (crawl.log has those); at INFO and below, every record."""
    level = getattr(logging, level_name)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.setLevel(level)
    if level > logging.INFO:
        handler.addFilter(_for_terminal)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO))


def quiet_broken_pipe() -> None:
    """The reader of our output went away (`jlse export | head`): later writes, the
    interpreter's last flush included, go nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
