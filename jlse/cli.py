"""The ``jlse`` command: crawl, export, train, eval, sandbox, demo."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from jlse.cli_sandbox import add_sandbox_parser
from jlse.cli_support import (
    LOG_LEVELS,
    HelpFormatter,
    Parser,
    describe_commands,
    log_to_terminal,
    quiet_broken_pipe,
    strategy_option,
    version,
)
from jlse.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    explain,
)
from jlse.settings import command_overrides

log = logging.getLogger("jlse")

EXIT_ERROR = EXIT_UNAVAILABLE  # a file or service the command needs is not there


def _crawl_exit(summary: Any) -> int:
    """Exit 4, with a line saying so, when no seed host could be reached at all."""
    if not summary.reached_nothing:
        return EXIT_OK
    print("error: no page was fetched: no seed host could be reached (DNS, connection or "
          "robots.txt failures; see the outcomes above and crawl.log)", file=sys.stderr)
    return EXIT_UNREACHABLE


def cmd_crawl(args: argparse.Namespace) -> int:
    from jlse.run import run_crawl

    overrides = command_overrides(args.set, {"max_pages": args.max_pages,
                                             "strategy": args.strategy,
                                             "concurrency": args.concurrency})
    if args.frontier:
        return _crawl_distributed(args, overrides)
    summary = run_crawl(args.topic, overrides, workdir=args.workdir, store_url=args.store,
                        resume=args.resume, fresh=args.fresh,
                        progress=False if args.no_progress else None)
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.render())
    if summary.reason != "interrupted":
        return _crawl_exit(summary)
    print(f"interrupted: the pages in flight were finished and saved; continue the crawl with\n"
          f"  {_resume_command(args)}", file=sys.stderr)
    return EXIT_INTERRUPTED


def cmd_discover(args: argparse.Namespace) -> int:
    from jlse.discovery.run import run_discovery

    overrides = command_overrides(args.set, {"max_pages": args.max_pages})
    summary = run_discovery(args.topic, args.search, overrides, workdir=args.workdir,
                            resume=args.resume, fresh=args.fresh,
                            progress=False if args.no_progress else None, out=args.out,
                            seeds_out=args.seeds_out, topic_out=args.topic_out,
                            bootstrap_samples=args.bootstrap_samples)
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.render())
    if summary.reason != "interrupted" and summary.pages == 0:
        print(f"error: discovery found no page: {summary.search_failures} searches failed "
              f"({summary.searches} requests) and no seed could be fetched (see "
              f"{Path(summary.workdir) / 'discover.log'})", file=sys.stderr)
        return EXIT_UNREACHABLE
    if summary.reason != "interrupted":
        return EXIT_OK
    print(f"interrupted: what was found is saved; continue with\n  {_resume_command(args)}",
          file=sys.stderr)
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
    cluster.use_redis(args.frontier)  # the workers' liveness is asked of the same Redis
    crawl_id = cluster.register_crawl(args.topic, overrides, store_url, args.frontier,
                                      args.crawl_id, resume=args.resume)
    summary = cluster.follow_crawl(args.frontier, crawl_id,
                                   progress=False if args.no_progress else None,
                                   store_url=store_url)
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.render())
    if summary.reason != "interrupted":
        return _crawl_exit(summary)
    print(f"interrupted: crawl {crawl_id} is stopped (tasks already sent to the workers still "
          f"finish); continue it with\n  {_resume_command(args)}", file=sys.stderr)
    return EXIT_INTERRUPTED


def cmd_dispatcher(args: argparse.Namespace) -> int:
    from jlse import cluster
    from jlse.scheduler.dispatcher import parse_shard_spec

    try:
        parse_shard_spec(args.shard)
    except ValueError as exc:
        print(f"jlse dispatcher: {exc}", file=sys.stderr)
        return EXIT_USAGE
    cluster.use_redis(args.frontier)
    cluster.run_dispatcher(args.shard)
    return EXIT_OK


def cmd_worker(args: argparse.Namespace) -> int:
    from jlse.workers import supervisor

    if not supervisor.is_child():  # Celery runs in a child that is restarted if it dies
        if args.command == "worker" and (refused := _page_store_refusal()):
            print(f"error: {refused}", file=sys.stderr)
            return EXIT_ERROR
        return supervisor.supervise(args.argv)
    from jlse import cluster

    cluster.use_redis(args.frontier)
    if args.command == "learner":
        cluster.run_worker("learn", 1, args.hostname or "learner@%h", args.pool)
    else:
        cluster.run_worker("fetch", args.concurrency, args.hostname, args.pool)
    return EXIT_OK


def _page_store_refusal() -> str | None:
    """Why this fetch worker cannot write its page store (checked once, before Celery)."""
    from jlse.workers import page_store

    directory = page_store.store_dir()
    try:
        if directory is not None:
            page_store.check_writable(directory)
    except page_store.PageStoreError as exc:
        return str(exc)
    return None


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
    dispatcher.add_argument("--shard", metavar="I/K",
                            help="serve frontier shards s with s %% K == I (K dispatchers split "
                                 "the shards; default: every shard)")
    worker = sub.add_parser("worker", help="distributed mode: a Celery fetch worker")
    worker.add_argument("--concurrency", type=int, default=2, help="worker processes")
    learner = sub.add_parser("learner", help="distributed mode: the Celery learner worker")
    status = sub.add_parser("status", help="distributed mode: crawls and workers")
    status.add_argument("--crawl-id", help="one crawl (default: every registered crawl)")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.add_argument("--timeout", type=float, default=1.0, help="worker ping timeout (s)")
    frontier = sub.add_parser("frontier", help="distributed mode: frontier maintenance")
    frontier.add_argument("action", choices=("rebuild",),
                          help="rebuild: refill the frontier from the crawl database")
    frontier.add_argument("--crawl-id", required=True, help="the crawl to rebuild")
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
    from jlse.export import (
        CONTENT_FIELDS,
        DEFAULT_FIELDS,
        WORKDIR_META,
        PageContents,
        export_pages,
        missing_note,
        parse_fields,
        warc_folder,
    )
    from jlse.scheduler.store import open_store

    fields = parse_fields(args.fields) if args.fields else \
        (CONTENT_FIELDS if args.content else DEFAULT_FIELDS)
    if args.html and "html" not in fields:
        fields = (*fields, "html")
    workdir = Path(args.workdir)
    store_url = args.store or f"sqlite:///{(workdir / 'crawl.db').resolve()}"
    if store_url.startswith("sqlite:///") and not Path(store_url[len("sqlite:///"):]).is_file():
        print(f"error: no crawl database at {store_url[len('sqlite:///'):]}", file=sys.stderr)
        return EXIT_ERROR
    try:
        with open_store(store_url, read_only=True) as store, _export_output(args.out) as out:
            contents = PageContents(Path(args.pages) if args.pages else workdir / "pages",
                                    warc_folder(args.warc, store_url, workdir, store))
            count = export_pages(store, out, args.format, None if args.all else args.min_relevance,
                                 args.targets_only, fields, args.times, contents)
            crawl_workdir = store.get_meta(WORKDIR_META)
    except BrokenPipeError:  # `jlse export | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    print(f"exported {count} pages", file=sys.stderr)
    if contents.missing:
        print(missing_note(contents, crawl_workdir), file=sys.stderr)
    return EXIT_OK


@contextlib.contextmanager
def _export_output(path: str | None) -> Iterator[TextIO]:
    """The export's output file (standard output without ``--out``)."""
    if not path:
        yield sys.stdout
        return
    with open(path, "w", encoding="utf-8", newline="") as handle:  # OSError: one line (errors.py)
        yield handle


def cmd_train(args: argparse.Namespace) -> int:
    from jlse.train import train_topic

    report = train_topic(args.topic, args.out, folds=args.folds)
    print(report.render())
    return EXIT_OK


def cmd_eval(args: argparse.Namespace) -> int:
    if args.discovery:
        return _eval_discovery(args)
    from jlse.eval import EvalError, run_eval

    topic_dirs = dict(pair.split("=", 1) for pair in args.topic_dir or [])
    web = None
    if args.web != "sandbox":
        if args.truth:
            raise EvalError(f"--web {args.web} and --truth: give one web")
        from jlse.sandbox import REAL_WEBS
        web = REAL_WEBS[args.web](seed=args.seed, fraction=args.fraction)
        web.negatives = args.negatives
    elif args.negatives != "random":
        raise EvalError("--negatives is for --web real or newswire (the sandbox's topic "
                        "directories draw their own irrelevant samples)")
    from jlse.sandbox.vocab import CRAWL_TOPICS
    report = run_eval(
        topics=(args.topics or ",".join(web.topics if web else CRAWL_TOPICS)).split(","),
        strategies=(args.strategies or "bfs,best-first,ata,jlse").split(","),
        budget=2000 if args.budget is None else args.budget,
        out_dir=Path(args.out or "runs/eval"), seed=args.seed,
        cf_sweep=[int(v) for v in args.cf_sweep.split(",")] if args.cf_sweep else None,
        checkpoints=tuple(int(v) for v in
                          (args.checkpoints or "100,250,500,1000,1500,2000").split(",")),
        truth_file=Path(args.truth) if args.truth else None,
        topic_dirs={k: Path(v) for k, v in topic_dirs.items()} or None, proxy=args.proxy,
        overrides=command_overrides(args.set, {}), oracle=not args.no_oracle, web=web,
        repeats=args.repeats,
    )
    print(report.render())
    return EXIT_OK


def _eval_discovery(args: argparse.Namespace) -> int:
    from jlse.eval import EvalError
    from jlse.eval_discovery import CHOOSERS, DEFAULT_BUDGET, DEFAULT_TOPICS, run_discovery_eval

    crawl_only = [flag for flag, value in (("--strategies", args.strategies),
                                           ("--cf-sweep", args.cf_sweep),
                                           ("--checkpoints", args.checkpoints),
                                           ("--truth", args.truth), ("--proxy", args.proxy),
                                           ("--topic-dir", args.topic_dir),
                                           ("--no-oracle", args.no_oracle),
                                           (f"--web {args.web}", args.web != "sandbox")) if value]
    if crawl_only:
        raise EvalError(f"{', '.join(crawl_only)}: not with --discovery (it runs on the sandbox "
                        "web)")
    report = run_discovery_eval(
        topics=(args.topics or ",".join(DEFAULT_TOPICS)).split(","),
        budget=DEFAULT_BUDGET if args.budget is None
        else args.budget, out_dir=Path(args.out or "runs/eval-discovery"), seed=args.seed,
        choosers=args.choosers.split(",") if args.choosers else CHOOSERS,
        alphas=[float(v) for v in args.alphas.split(",")], parallel=args.parallel,
        repeats=args.repeats, keywords_only=args.keywords_only, overrides=command_overrides(args.set, {}))
    print(report.render())
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from jlse.demo import run_demo

    overrides = command_overrides(args.set, {"max_pages": args.max_pages,
                                             "strategy": args.strategy})
    return _crawl_exit(run_demo(args.topic, Path(args.workdir), overrides))


def _add_crawl_parser(sub: Any) -> None:
    crawl = sub.add_parser("crawl", help="crawl the web for a topic (embedded, or distributed "
                           "with --frontier)")
    crawl.add_argument("--topic", required=True, type=Path, help="topic directory")
    crawl.add_argument("--max-pages", type=int, help="page budget, robots.txt not counted "
                       "(default: max_pages of topic.toml, else 1000)")
    strategy_option(crawl, "--strategy", "link strategy: %(names)s (default: strategy of "
                    "topic.toml, else auto: jlse with samples or keywords, else bfs)")
    crawl.add_argument("--concurrency", type=int, help="pages in flight at once (default: "
                       "concurrency of topic.toml, else 16)")
    crawl.add_argument("--store", help="crawl database URL, sqlite:///... or postgresql://... "
                       "(default: WORKDIR/crawl.db)")
    crawl.add_argument("--frontier", help="redis://... frontier: distributed mode (needs "
                       "jlse[distributed], a dispatcher and workers)")
    crawl.add_argument("--crawl-id", help="distributed mode: the crawl's id (default: the "
                       "topic name)")
    crawl.add_argument("--workdir", type=Path, help="where the crawl keeps its files "
                       "(default: runs/<topic name>)")
    crawl.add_argument("--resume", action="store_true", help="continue the crawl in the store")
    crawl.add_argument("--fresh", action="store_true", help="delete the workdir's crawl first")
    crawl.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="any setting (repeatable); the flags above win over it")
    crawl.add_argument("--no-progress", action="store_true", help="no progress bar")
    crawl.add_argument("--json", action="store_true", help="print the summary as JSON")
    crawl.set_defaults(func=cmd_crawl)


def _add_discover_parser(sub: Any) -> None:
    discover = sub.add_parser(
        "discover", help="find the websites of a topic through a search engine and the link "
        "graph, ranked; write a seeds.txt for `jlse crawl`",
        description="Domain discovery (docs/algorithms.md section 3): from the topic's samples "
                    "or keywords, find pages with forward and backward crawling, keyword and "
                    "related search (a SearxNG JSON API), rank them and their sites.")
    discover.add_argument("--topic", required=True, type=Path, help="topic directory (samples "
                          "and/or keywords; seeds.txt optional)")
    discover.add_argument("--search", required=True, metavar="URL", help="a SearxNG instance "
                          "with the JSON format on, e.g. http://127.0.0.1:8888")
    discover.add_argument("--max-pages", type=int, help="pages to fetch (default: max_pages of "
                          "topic.toml, else 1000); searches are not counted")
    discover.add_argument("--out", type=Path, help="the ranked sites, JSON lines (the ranked "
                          "pages go to OUT's name + .pages; default: WORKDIR/discovery/)")
    discover.add_argument("--seeds-out", type=Path, help="a seeds.txt of the best sites")
    discover.add_argument("--topic-out", type=Path, metavar="DIR",
                          help="a new topic directory to crawl: the topic's settings and "
                          "samples, its seeds and the discovered ones")
    discover.add_argument("--bootstrap-samples", action="store_true",
                          help="with --topic-out, a missing class of sample pages made up from "
                          "the run: its best pages as relevant, pages the keywords' model "
                          "judged irrelevant as irrelevant (a trained classifier for a "
                          "keyword-only topic; see the README before using it)")
    discover.add_argument("--workdir", type=Path, help="where discovery keeps its files "
                          "(default: runs/<topic name>-discovery)")
    discover.add_argument("--resume", action="store_true", help="continue the run in WORKDIR")
    discover.add_argument("--fresh", action="store_true", help="delete WORKDIR's run first")
    discover.add_argument("--set", action="append", metavar="KEY=VALUE",
                          help="any setting (repeatable), e.g. discovery_chooser=random")
    discover.add_argument("--no-progress", action="store_true", help="no progress bar")
    discover.add_argument("--json", action="store_true", help="print the summary as JSON")
    discover.set_defaults(func=cmd_discover)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="jlse", formatter_class=HelpFormatter,
                    description="A focused web crawler: it crawls the pages on one topic and "
                    "learns which links lead to them. `jlse COMMAND --help` tells more.",
                    epilog="exit codes: 0 done, 1 internal error (a bug), 2 usage (bad option, "
                    "setting or topic), 3 unavailable (a service, port, file or extra), 4 the "
                    "crawl reached no seed host, 130 interrupted")
    parser.add_argument("--version", action="version", version=f"jlse {version()}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log INFO to the terminal, and show the traceback of an error")
    parser.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS,
                        help="what the terminal shows of the log (default: WARNING; "
                        "INFO with -v); the crawl's own crawl.log always has INFO")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_crawl_parser(sub)
    _add_discover_parser(sub)

    export = sub.add_parser(
        "export", help="export fetched pages with scores, and their text on request",
        description="Write the relevant (or target, or all fetched) pages of a crawl as JSON "
                    "lines or CSV. The crawl database is opened read-only.")
    export.add_argument("--workdir", default=".", help="the crawl's workdir (crawl.db, pages/ "
                        "and warc/ inside; default: the current folder)")
    export.add_argument("--store", help="crawl database URL instead of WORKDIR/crawl.db")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl",
                        help="output format (default: jsonl)")
    export.add_argument("--out", help="output file (default: standard output)")
    export.add_argument("--min-relevance", type=float, default=0.5,
                        help="pages with at least this P(relevant) (default: 0.5)")
    export.add_argument("--targets-only", action="store_true", help="target (detail) pages only")
    export.add_argument("--all", action="store_true", help="every fetched page")
    export.add_argument("--content", action="store_true",
                        help="also final_url, outcome, n_bytes, discovered_at, anchor_text, "
                             "context (of the link that found the page) and the page's text")
    export.add_argument("--html", action="store_true", help="also the page's HTML")
    export.add_argument("--fields", help="comma-separated columns, in order (see the README); "
                                         "overrides --content")
    export.add_argument("--times", choices=("unix", "iso"), default="unix",
                        help="fetched_at/discovered_at as unix seconds or ISO 8601 UTC "
                             "(default: unix)")
    export.add_argument("--pages", help="page repository for text/html (default: WORKDIR/pages)")
    export.add_argument("--warc", help="WARC folder for text/html when the repository lacks a "
                                       "page (default: WORKDIR/warc; with a PostgreSQL --store, "
                                       "the page store: $JLSE_PAGES_STORE, else the folder the "
                                       "workers noted)")
    export.set_defaults(func=cmd_export)

    add_sandbox_parser(sub)

    train = sub.add_parser("train", help="fit the topic's classifiers, report CV accuracy, save them")
    train.add_argument("--topic", required=True, type=Path, help="topic directory")
    train.add_argument("--out", type=Path, help="model directory (default: TOPIC/model)")
    train.add_argument("--folds", type=int, default=5, help="cross-validation folds")
    train.set_defaults(func=cmd_train)

    evaluate = sub.add_parser(
        "eval", help="compare strategies with each other and with an oracle crawl (or, with "
        "--discovery, domain discovery's operator choice and rankings) on a web with ground "
        "truth")
    evaluate.add_argument("--topics", help="topics, comma-separated (default: phones,cameras,"
                          "laptops on the sandbox, every topic of --web real or newswire)")
    evaluate.add_argument("--web", choices=("sandbox", "real", "newswire"), default="sandbox",
                          help="real: the real-text web (20 Newsgroups posts); newswire: "
                          "Reuters stories, a web no default is tuned on (both: `make corpus`)")
    evaluate.add_argument("--fraction", type=float, default=1.0, help="--web real or newswire: "
                          "the share of the documents it serves")
    evaluate.add_argument("--negatives", choices=("random", "stratified"), default="random",
                          help="--web real or newswire: the topic directories' 20 irrelevant "
                          "samples drawn "
                          "at random from the other topics (some topic may have none) or "
                          "as many from each other topic")
    strategy_option(evaluate, "--strategies", "strategies to compare, comma-separated, "
                    "among %(names)s, each may end in +truth (pages judged by the ground "
                    "truth, not the classifier) (default: bfs,best-first,ata,jlse)")
    evaluate.add_argument("--budget", type=int, help="pages per crawl (default: 2000; with "
                          "--discovery 500 per discovery run)")
    evaluate.add_argument("--out", help="report and plots directory (default: runs/eval; with "
                          "--discovery runs/eval-discovery)")
    evaluate.add_argument("--seed", type=int, default=7, help="sandbox web seed")
    evaluate.add_argument("--checkpoints", help="page counts at which harvest and recall are "
                          "measured (default: 100,250,500,1000,1500,2000)")
    evaluate.add_argument("--cf-sweep", help="e.g. 50,100,150,200 (jlse only)")
    evaluate.add_argument("--truth", help="ground truth JSON lines of another web")
    evaluate.add_argument("--topic-dir", action="append", metavar="NAME=DIR",
                          help="topic directory for --truth webs")
    evaluate.add_argument("--proxy", help="HTTP proxy reaching that web")
    evaluate.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                          help="a setting for every crawl of the evaluation (repeatable)")
    evaluate.add_argument("--no-oracle", action="store_true", help="skip the oracle (on the "
                          "sandbox: a crawl knowing every page's label and the link graph, "
                          "the bound that efficiency = HR@N / oracle HR@N is measured "
                          "against; n/a with --truth)")
    evaluate.add_argument("--repeats", type=int, default=1, help="runs of each crawl (of "
                          "each topic and chooser with --discovery); runs vary with timing, "
                          "and the report gives each strategy's mean and range over them")
    discovery = evaluate.add_argument_group(
        "domain discovery (docs/algorithms.md section 3.6)",
        "--discovery: on the sandbox's discovery web, one `jlse discover` run per topic and "
        "chooser; page and site harvest against pages fetched, P@10/20/50 and Mean/Median Rank "
        "of the ranked sites (seed sites excluded), the UCB1 run's pages ranked by each "
        "function and alpha; OUT/discovery-report.md. 6 choosers x 3 topics at 500 pages: "
        "about 4 minutes per repeat on 2 cores")
    discovery.add_argument("--discovery", action="store_true", help="evaluate domain discovery")
    discovery.add_argument("--choosers", help="operator choosers (default: ucb1,forward,"
                           "backward,keyword,related,random)")
    discovery.add_argument("--alphas", default="0,0.2,0.5", help="PageRank weights of the "
                           "ranking sweep")
    discovery.add_argument("--parallel", type=int, default=1, help="discovery runs at once")
    discovery.add_argument("--keywords-only", action="store_true", help="topic directories "
                           "without sample pages (discovery from the keywords)")
    evaluate.set_defaults(func=cmd_eval)

    demo = sub.add_parser("demo", help="crawl the built-in sandbox web (no setup needed)")
    demo.add_argument("--topic", default="phones", help="sandbox topic")
    demo.add_argument("--max-pages", type=int, help="page budget (default: 500)")
    strategy_option(demo, "--strategy", "link strategy: %(names)s (default: jlse)")
    demo.add_argument("--workdir", default="runs/demo", help="deleted and written anew")
    demo.add_argument("--set", action="append", metavar="KEY=VALUE",
                      help="any setting (repeatable); the flags above win over it")
    demo.set_defaults(func=cmd_demo)
    _add_cluster_parsers(sub)
    describe_commands(sub)
    return parser


def _run(args: argparse.Namespace) -> int:
    code = args.func(args)
    sys.stdout.flush()  # here, so a reader that went away (`| head`) is seen in main
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for the --resume hint
    log_to_terminal(args.log_level or ("INFO" if args.verbose else "WARNING"))
    try:
        return _run(args)
    except KeyboardInterrupt:
        hint = f"; continue with\n  {_resume_command(args)}" \
            if args.command in ("crawl", "discover") else ""
        print(f"interrupted{hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `jlse export | head`
        quiet_broken_pipe()
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - every error is one line; -v adds the traceback
        code, message = explain(exc)
        if args.verbose:
            traceback.print_exc()
        print(f"error: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
