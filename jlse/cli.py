"""The ``jlse`` command: crawl, export, train, eval, sandbox, demo."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from jlse.settings import SettingsError

log = logging.getLogger("jlse")

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _setting_pairs(pairs: list[str]) -> dict[str, Any]:
    """``--set key=value`` flags as a dict (values are typed by the settings validator)."""
    result: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"--set {pair!r}: expected key=value")
        result[key.strip()] = value.strip()
    return result


def cmd_crawl(args: argparse.Namespace) -> int:
    from jlse.run import run_crawl

    overrides = _setting_pairs(args.set or [])
    overrides.update({"max_pages": args.max_pages, "strategy": args.strategy,
                      "concurrency": args.concurrency})
    if args.frontier:
        return _crawl_distributed(args, overrides)
    summary = run_crawl(args.topic, overrides, workdir=args.workdir, store_url=args.store,
                        resume=args.resume, fresh=args.fresh,
                        progress=False if args.no_progress else None)
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.render())
    if summary.reason != "interrupted":
        return EXIT_OK
    print(f"interrupted: the pages in flight were finished and saved; continue the crawl with\n"
          f"  {_resume_command(args)}", file=sys.stderr)
    return EXIT_INTERRUPTED


def _resume_command(args: argparse.Namespace) -> str:
    """The command line that was run, with ``--resume`` (and without ``--fresh``)."""
    argv = [arg for arg in getattr(args, "argv", ["crawl", "..."]) if arg != "--fresh"]
    if "--resume" not in argv:
        argv.append("--resume")
    return shlex.join(["jlse", *argv])


def _crawl_distributed(args: argparse.Namespace, overrides: dict[str, Any]) -> int:
    from jlse import cluster

    store_url = args.store or os.environ.get("DATABASE_URL")
    if not store_url or not store_url.startswith(("postgresql://", "postgres://")):
        print("error: --frontier needs a PostgreSQL crawl database: --store postgresql://... "
              "(or DATABASE_URL)", file=sys.stderr)
        return EXIT_USAGE
    crawl_id = cluster.register_crawl(args.topic, overrides, store_url, args.frontier,
                                      args.crawl_id, resume=args.resume)
    summary = cluster.follow_crawl(args.frontier, crawl_id,
                                   progress=False if args.no_progress else None)
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.render())
    if summary.reason != "interrupted":
        return EXIT_OK
    print(f"interrupted: crawl {crawl_id} is stopped (tasks already sent to the workers still "
          f"finish); continue it with\n  {_resume_command(args)}", file=sys.stderr)
    return EXIT_INTERRUPTED


def cmd_dispatcher(args: argparse.Namespace) -> int:
    from jlse import cluster

    cluster.use_redis(args.frontier)
    cluster.run_dispatcher()
    return EXIT_OK


def cmd_worker(args: argparse.Namespace) -> int:
    from jlse.workers import supervisor

    if not supervisor.is_child():  # Celery runs in a child that is restarted if it dies
        return supervisor.supervise(args.argv)
    from jlse import cluster

    cluster.use_redis(args.frontier)
    if args.command == "learner":
        cluster.run_worker("learn", 1, args.hostname or "learner@%h", args.pool)
    else:
        cluster.run_worker("fetch", args.concurrency, args.hostname, args.pool)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from jlse import cluster

    cluster.use_redis(args.frontier)
    status = cluster.cluster_status(args.crawl_id, ping_timeout=args.timeout)
    print(json.dumps(status, indent=2) if args.json else cluster.render_status(status))
    return EXIT_OK


def cmd_frontier(args: argparse.Namespace) -> int:
    from jlse import cluster

    url = args.frontier or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    queued = cluster.rebuild_frontier(args.crawl_id, args.store, url)
    print(f"frontier of crawl {args.crawl_id} rebuilt from the crawl database: {queued} URLs queued")
    return EXIT_OK


def _add_cluster_parsers(sub: Any) -> None:
    dispatcher = sub.add_parser("dispatcher", help="distributed mode: feed the workers")
    worker = sub.add_parser("worker", help="distributed mode: a Celery fetch worker")
    worker.add_argument("--concurrency", type=int, default=2, help="worker processes")
    learner = sub.add_parser("learner", help="distributed mode: the Celery learner worker")
    status = sub.add_parser("status", help="distributed mode: crawls and workers")
    status.add_argument("--crawl-id")
    status.add_argument("--json", action="store_true")
    status.add_argument("--timeout", type=float, default=1.0, help="worker ping timeout (s)")
    frontier = sub.add_parser("frontier", help="distributed mode: frontier maintenance")
    frontier.add_argument("action", choices=("rebuild",))
    frontier.add_argument("--crawl-id", required=True)
    frontier.add_argument("--store", help="crawl database URL (default: the registered one)")
    for role in (worker, learner):
        role.add_argument("--hostname", help="Celery node name, e.g. w1@%%h")
        role.add_argument("--pool", choices=("prefork", "solo", "threads"), help="Celery pool")
        role.set_defaults(func=cmd_worker)
    for parser in (dispatcher, worker, learner, status, frontier):
        parser.add_argument("--frontier", help="frontier Redis URL (default: REDIS_URL)")
    dispatcher.set_defaults(func=cmd_dispatcher)
    status.set_defaults(func=cmd_status)
    frontier.set_defaults(func=cmd_frontier)


def cmd_export(args: argparse.Namespace) -> int:
    from jlse.export import export_pages
    from jlse.scheduler.store import open_store

    store_url = args.store or f"sqlite:///{(Path(args.workdir) / 'crawl.db').resolve()}"
    if store_url.startswith("sqlite:///") and not Path(store_url[len("sqlite:///"):]).exists():
        print(f"error: no crawl database at {store_url}", file=sys.stderr)
        return EXIT_ERROR
    min_relevance = None if args.all else args.min_relevance
    with open_store(store_url) as store:
        out = open(args.out, "w", encoding="utf-8", newline="") if args.out else sys.stdout
        try:
            count = export_pages(store, out, args.format, min_relevance, args.targets_only)
        finally:
            if args.out:
                out.close()
    print(f"exported {count} pages", file=sys.stderr)
    return EXIT_OK


def cmd_sandbox(args: argparse.Namespace) -> int:
    from jlse.sandbox import SandboxServer, build_web

    web = build_web(seed=args.seed, scale=args.scale)
    if args.action == "truth":
        web.write_truth(Path(args.out))
        print(f"ground truth of {web.n_pages} pages written to {args.out}")
        return EXIT_OK
    if args.action == "topic":
        if args.name not in web.topics:
            print(f"error: unknown topic {args.name!r}; choose from {', '.join(web.topics)}",
                  file=sys.stderr)
            return EXIT_USAGE
        path = web.write_topic_dir(args.name, Path(args.out))
        print(f"topic directory written to {path}")
        return EXIT_OK
    server = SandboxServer(web, host=args.host, port=args.port, latency=args.latency)
    server.start()
    print(f"sandbox web: {len(web.sites)} sites, {web.n_pages} pages; "
          f"use it as an HTTP proxy: HTTP_PROXY={server.proxy_url}  (Ctrl+C stops)", flush=True)
    try:
        import threading

        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return EXIT_OK


def cmd_train(args: argparse.Namespace) -> int:
    from jlse.train import train_topic

    report = train_topic(args.topic, args.out, folds=args.folds)
    print(report.render())
    return EXIT_OK


def cmd_eval(args: argparse.Namespace) -> int:
    from jlse.eval import run_eval

    topic_dirs = dict(pair.split("=", 1) for pair in args.topic_dir or [])
    report = run_eval(
        topics=args.topics.split(","), strategies=args.strategies.split(","),
        budget=args.budget, out_dir=Path(args.out), seed=args.seed,
        cf_sweep=[int(v) for v in args.cf_sweep.split(",")] if args.cf_sweep else None,
        checkpoints=tuple(int(v) for v in args.checkpoints.split(",")),
        truth_file=Path(args.truth) if args.truth else None,
        topic_dirs={k: Path(v) for k, v in topic_dirs.items()} or None, proxy=args.proxy,
        overrides=_setting_pairs(args.set),
    )
    print(report.render())
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from jlse.demo import run_demo

    return run_demo(args.topic, args.max_pages, Path(args.workdir), args.strategy)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jlse", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log INFO to the terminal")
    sub = parser.add_subparsers(dest="command", required=True)

    crawl = sub.add_parser("crawl", help="crawl for a topic")
    crawl.add_argument("--topic", required=True, type=Path, help="topic directory")
    crawl.add_argument("--max-pages", type=int, help="page budget (robots.txt not counted)")
    crawl.add_argument("--strategy", help="link strategy (default: auto); an unknown name "
                       "lists the available ones")
    crawl.add_argument("--concurrency", type=int)
    crawl.add_argument("--store", help="crawl database URL (sqlite:///... or postgresql://...)")
    crawl.add_argument("--frontier", help="redis://... frontier (distributed mode)")
    crawl.add_argument("--crawl-id", help="distributed mode: default the topic name")
    crawl.add_argument("--workdir", type=Path, help="default: runs/<topic name>")
    crawl.add_argument("--resume", action="store_true", help="continue the crawl in the store")
    crawl.add_argument("--fresh", action="store_true", help="delete the workdir's crawl first")
    crawl.add_argument("--set", action="append", metavar="KEY=VALUE", help="any setting")
    crawl.add_argument("--no-progress", action="store_true")
    crawl.add_argument("--json", action="store_true", help="print the summary as JSON")
    crawl.set_defaults(func=cmd_crawl)

    export = sub.add_parser("export", help="export relevant/target pages with scores")
    export.add_argument("--workdir", default=".", help="the crawl's workdir (crawl.db inside)")
    export.add_argument("--store", help="crawl database URL instead of --workdir")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    export.add_argument("--out", help="output file (default: standard output)")
    export.add_argument("--min-relevance", type=float, default=0.5)
    export.add_argument("--targets-only", action="store_true")
    export.add_argument("--all", action="store_true", help="every fetched page")
    export.set_defaults(func=cmd_export)

    sandbox = sub.add_parser("sandbox", help="the built-in test web")
    sandbox.add_argument("action", choices=("serve", "truth", "topic"))
    sandbox.add_argument("name", nargs="?", help="topic name (for 'topic')")
    sandbox.add_argument("--host", default="127.0.0.1")
    sandbox.add_argument("--port", type=int, default=8899)
    sandbox.add_argument("--seed", type=int, default=7)
    sandbox.add_argument("--scale", type=float, default=1.0)
    sandbox.add_argument("--latency", type=float, default=0.0, help="seconds per response")
    sandbox.add_argument("--out", default="sandbox-out", help="output path (truth/topic)")
    sandbox.set_defaults(func=cmd_sandbox)

    train = sub.add_parser("train", help="fit the topic's classifiers, report CV accuracy, save them")
    train.add_argument("--topic", required=True, type=Path)
    train.add_argument("--out", type=Path, help="model directory (default: TOPIC/model)")
    train.add_argument("--folds", type=int, default=5)
    train.set_defaults(func=cmd_train)

    evaluate = sub.add_parser("eval", help="compare strategies on a web with ground truth")
    evaluate.add_argument("--topics", default="phones,cameras,laptops")
    evaluate.add_argument("--strategies", default="bfs,best-first,ata,jlse")
    evaluate.add_argument("--budget", type=int, default=2000)
    evaluate.add_argument("--out", default="runs/eval")
    evaluate.add_argument("--seed", type=int, default=7, help="sandbox web seed")
    evaluate.add_argument("--checkpoints", default="100,250,500,1000,1500,2000")
    evaluate.add_argument("--cf-sweep", help="e.g. 50,100,150,200 (jlse only)")
    evaluate.add_argument("--truth", help="ground truth JSON lines of another web")
    evaluate.add_argument("--topic-dir", action="append", metavar="NAME=DIR",
                          help="topic directory for --truth webs")
    evaluate.add_argument("--proxy", help="HTTP proxy reaching that web")
    evaluate.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                          help="a setting for every crawl of the evaluation (repeatable)")
    evaluate.set_defaults(func=cmd_eval)

    demo = sub.add_parser("demo", help="crawl the built-in sandbox web (no setup needed)")
    demo.add_argument("--topic", default="phones")
    demo.add_argument("--max-pages", type=int, default=500)
    demo.add_argument("--strategy", default="jlse", help="link strategy")
    demo.add_argument("--workdir", default="runs/demo")
    demo.set_defaults(func=cmd_demo)
    _add_cluster_parsers(sub)
    return parser


def _log_to_terminal(verbose: bool) -> None:
    """Terminal: our own warnings (every fetch outcome is in the crawl's log file instead)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    if verbose:
        handler.setLevel(logging.INFO)
    else:
        handler.setLevel(logging.WARNING)
        handler.addFilter(lambda record: record.levelno >= logging.ERROR
                          or record.name.startswith("jlse"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def _usage_errors() -> tuple[type[BaseException], ...]:
    """Errors shown as one line (exit 2). The registry's is only known once distributed mode
    was used: importing it (and redis) up front would slow every command's start."""
    from jlse.run import CrawlSetupError
    from jlse.topic import TopicError

    errors: list[type[BaseException]] = [SettingsError, TopicError, CrawlSetupError, ValueError]
    registry = sys.modules.get("jlse.scheduler.crawl_registry")
    if registry is not None:
        errors.append(registry.RegistryError)
    return tuple(errors)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for the --resume hint
    _log_to_terminal(args.verbose)
    try:
        return args.func(args)
    except Exception as exc:
        if not isinstance(exc, _usage_errors()):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        hint = f"; continue with\n  {_resume_command(args)}" if args.command == "crawl" else ""
        print(f"interrupted{hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `jlse export | head`
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
