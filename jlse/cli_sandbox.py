"""``jlse sandbox serve | truth | topic``: the built-in test web, one subcommand each, so each
one's ``--help`` lists only its own options."""

from __future__ import annotations

import argparse
import errno
import sys
import threading
from pathlib import Path
from typing import Any

from jlse.cli_support import HelpFormatter, port_number
from jlse.errors import EXIT_OK, EXIT_USAGE, UnavailableError


def cmd_sandbox(args: argparse.Namespace) -> int:
    web = _build(args)
    if args.action == "truth":
        return _write_truth(web, args)
    if args.action == "topic":
        return _write_topic(web, args)
    from jlse.sandbox import SandboxServer

    return _serve(SandboxServer(web, host=args.host, port=args.port, latency=args.latency), args)


def add_sandbox_parser(sub: Any) -> None:
    sandbox = sub.add_parser("sandbox", help="the built-in test web: serve it, its ground "
                             "truth, a topic directory for it")
    actions = sandbox.add_subparsers(dest="action", required=True, metavar="ACTION",
                                     help="what to do with it (each has its own --help)")
    serve = _action(actions, "serve", "serve it on loopback: an HTTP proxy and a search engine")
    serve.add_argument("--host", default="127.0.0.1", help="address to serve on")
    serve.add_argument("--port", type=port_number, default=8899, help="port to serve on "
                       "(0: any free port)")
    serve.add_argument("--latency", type=float, default=0.0, help="seconds per response")
    truth = _action(actions, "truth", "write its ground truth, JSON lines")
    truth.add_argument("--out", default="sandbox-out", help="output file")
    truth.add_argument("--sites", action="store_true", help="one line per site (its majority "
                       "topic and share) instead of per page")
    topic = _action(actions, "topic", "write a topic directory for one of its topics")
    topic.add_argument("name", nargs="?", metavar="NAME", help="the topic, e.g. phones (without one: the list)")
    topic.add_argument("--out", default="sandbox-out", help="the topic directory to write")
    topic.add_argument("--keywords-only", action="store_true", help="seeds.txt and topic.toml "
                       "(keywords) without sample pages")
    for parser in (serve, truth, topic):
        _add_web_options(parser)
        parser.set_defaults(func=cmd_sandbox)


def _add_web_options(parser: argparse.ArgumentParser) -> None:
    """Which web: the options every action shares."""
    parser.add_argument("--seed", type=int, default=7, help="the web's random seed")
    parser.add_argument("--scale", type=float, default=1.0, help="pages per site, multiplied")
    parser.add_argument("--discovery", action="store_true", help="the discovery web: the "
                        "sandbox plus a long tail of small sites the seeds barely link to")
    parser.add_argument("--web", choices=("sandbox", "real", "newswire"), default="sandbox",
                        help="real: the real-text web (20 Newsgroups posts); newswire: Reuters "
                        "stories on 96 news sites (`make corpus` fetches both)")
    parser.add_argument("--fraction", type=float, default=1.0, help="--web real or newswire: "
                        "the share of the documents kept (a stratified slice)")


def _action(actions: Any, name: str, text: str) -> argparse.ArgumentParser:
    return actions.add_parser(name, help=text, description=text, formatter_class=HelpFormatter)


def _build(args: argparse.Namespace) -> Any:
    from jlse.sandbox import REAL_WEBS, build_web

    if args.web != "sandbox":
        if args.discovery:
            raise ValueError(f"--discovery is a layout of the sandbox web, not of --web "
                             f"{args.web}")
        return REAL_WEBS[args.web](seed=args.seed, fraction=args.fraction)
    return build_web(seed=args.seed, scale=args.scale, discovery=args.discovery)


def _write_truth(web: Any, args: argparse.Namespace) -> int:
    if args.sites:
        web.write_site_truth(Path(args.out))
        print(f"site truth of {len(web.site_truth())} sites written to {args.out}")
    else:
        web.write_truth(Path(args.out))
        print(f"ground truth of {web.n_pages} pages written to {args.out}")
    return EXIT_OK


def _write_topic(web: Any, args: argparse.Namespace) -> int:
    if args.name not in web.topics:
        problem = f"unknown topic {args.name!r}" if args.name else "give a topic name"
        print(f"error: {problem}: jlse sandbox topic NAME, NAME one of "
              f"{', '.join(web.topics)}", file=sys.stderr)
        return EXIT_USAGE
    path = web.write_topic_dir(args.name, Path(args.out), keywords_only=args.keywords_only)
    print(f"topic directory written to {path}")
    return EXIT_OK


def _serve(server: Any, args: argparse.Namespace) -> int:
    web = server.web
    try:
        server.start()
    except OSError as exc:  # port in use, or an address this machine does not have
        hint = " (pick another --port)" if exc.errno == errno.EADDRINUSE else ""
        raise UnavailableError(f"cannot serve on {args.host}:{args.port}: "
                               f"{exc.strerror or exc}{hint}") from exc
    print(f"sandbox web: {len(web.sites)} sites, {web.n_pages} pages; "
          f"use it as an HTTP proxy: HTTP_PROXY={server.proxy_url} (its search engine, "
          f"SearxNG's JSON API: --search http://{args.host}:{server.port})  Ctrl+C stops",
          flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return EXIT_OK
