"""The command line as a user meets it: version, help, --set, the crawl summary and log,
--log-level, rates after --resume, topic files in other encodings, the install targets."""

from __future__ import annotations

import argparse
import csv
import json
import re
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from jlse.cli import build_parser
from jlse.progress import CrawlSummary
from jlse.run import run_crawl
from jlse.scheduler.store import open_store
from jlse.topic import TopicError, load_topic

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--set", "politeness_delay=0.02", "--set", "robots_retry_after=0.5"]


def jlse(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jlse.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def phones_topic(sandbox_web, tmp_path_factory) -> Path:
    return sandbox_web.write_topic_dir("phones", tmp_path_factory.mktemp("topic") / "phones")


def test_version():
    done = jlse("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"jlse {version('jlse')}"


def _subcommands() -> dict:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return sub.choices


def test_every_subcommand_has_a_description_and_its_options_help():
    commands = list(_subcommands().items())
    for name, command in commands:
        assert command.description, name
        for action in command._actions:
            assert action.help, (name, action.dest)
            if isinstance(action, argparse._SubParsersAction):  # jlse sandbox serve, ...
                commands += [(f"{name} {sub}", parser) for sub, parser in action.choices.items()]
    assert "sandbox serve" in dict(commands)


def test_help_shows_defaults():
    assert "(default: 5)" in _subcommands()["train"].format_help()
    crawl_help = jlse("crawl", "--help").stdout
    assert "(default: runs/<topic" in crawl_help and "(default: None)" not in crawl_help


def test_crawl_help_lists_the_strategies():
    from jlse.models.strategy_catalog import available_strategies

    crawl_help = " ".join(jlse("crawl", "--help").stdout.split())
    assert f"link strategy: {', '.join(available_strategies())} (default:" in crawl_help
    assert "jlse-paper" in crawl_help and "cfc" in crawl_help


def test_each_sandbox_action_shows_only_its_own_options():
    helps = {action: jlse("sandbox", action, "--help") for action in ("serve", "truth", "topic")}
    assert all(done.returncode == 0 for done in helps.values())
    own = {"serve": ("--port", "--host", "--latency"), "truth": ("--sites",),
           "topic": ("--keywords-only", "NAME")}
    for action, done in helps.items():
        for other, flags in own.items():
            for flag in flags:
                assert (flag in done.stdout) == (action == other), (action, flag)
        assert "--seed" in done.stdout and "--web" in done.stdout  # the web: every action's
    assert "(default: 8899)" in helps["serve"].stdout
    assert "(default: 127.0.0.1)" in helps["serve"].stdout


def test_set_is_honoured_and_the_flags_win_over_it(phones_topic, sandbox, tmp_path):
    """--set max_pages/strategy/concurrency were overwritten by the unset flags (None)."""
    workdir = tmp_path / "w"
    done = jlse("crawl", "--topic", str(phones_topic), "--workdir", str(workdir),
                "--no-progress", "--set", f"proxy={sandbox.proxy_url}", *FAST,
                "--set", "max_pages=5", "--set", "strategy=bfs", "--set", "concurrency=1")
    assert done.returncode == 0, done.stderr
    assert re.search(r"pages fetched\s+5\b", done.stdout), done.stdout
    with open_store(f"sqlite:///{workdir / 'crawl.db'}") as store:
        settings = json.loads(store.get_meta("settings"))
    assert (settings["strategy"], settings["concurrency"]) == ("bfs", 1)
    again = jlse("crawl", "--topic", str(phones_topic), "--workdir", str(tmp_path / "w2"),
                 "--no-progress", "--json", "--set", f"proxy={sandbox.proxy_url}", *FAST,
                 "--set", "max_pages=50", "--max-pages", "3", "--strategy", "bfs")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["fetched"] == 3


def test_summary_says_how_to_export_and_crawl_log_says_what_the_crawl_is(
        phones_topic, sandbox, tmp_path):
    workdir = tmp_path / "w"
    done = jlse("crawl", "--topic", str(phones_topic), "--workdir", str(workdir),
                "--no-progress", "--max-pages", "4", "--set", f"proxy={sandbox.proxy_url}",
                *FAST)
    assert done.returncode == 0, done.stderr
    assert f"jlse export --workdir {workdir}" in done.stdout
    head = (workdir / "crawl.log").read_text(encoding="utf-8").splitlines()[:4]
    assert "new crawl of topic phones" in head[0] and "strategy jlse" in head[0]
    assert "page budget 4" in head[0]
    assert "politeness_delay=0.02" in head[1] and f"proxy='{sandbox.proxy_url}'" in head[1]
    assert "topic model: trained on the fly" in head[2]
    assert "self-training: on" in head[3]  # the phones topic has keywords


def test_a_crawl_into_postgresql_says_an_export_that_works_and_export_finds_its_pages(
        phones_topic, sandbox, pg_store_url, tmp_path):
    """The summary's export line names the database (--store, no password) and the workdir
    (the pages); export run elsewhere without the workdir says where it looked and where the
    crawl kept its pages, instead of an empty text for every page without a word."""
    workdir = tmp_path / "w"
    store = pg_store_url.replace("postgresql://postgres@", "postgresql://postgres:pw@")
    done = jlse("crawl", "--topic", str(phones_topic), "--workdir", str(workdir), "--store",
                store, "--no-progress", "--max-pages", "6", "--set", "strategy=bfs",
                "--set", f"proxy={sandbox.proxy_url}", *FAST)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "export with" in line]
    argv = shlex.split(line.split("export with", 1)[1])
    assert argv[:3] == ["jlse", "export", "--store"] and argv[3] == pg_store_url  # no password
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    export = [sys.executable, "-m", "jlse.cli", *argv[1:]]
    out = elsewhere / "pages.csv"
    followed = subprocess.run([*export, "--content"], capture_output=True, text=True, cwd=elsewhere,
                              timeout=120)
    assert followed.returncode == 0, followed.stderr
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert len(rows) >= 3 and all(row["text"].strip() for row in rows if row["outcome"] == "ok")
    assert "no stored copy" not in followed.stderr
    bare = subprocess.run([sys.executable, "-m", "jlse.cli", "export", "--store", pg_store_url,
                           "--content", "--all", "--out", "x.jsonl"], capture_output=True,
                          text=True, cwd=elsewhere, timeout=120)
    assert bare.returncode == 0, bare.stderr
    assert "pages have no stored copy in pages (not there) and warc (not there)" in bare.stderr
    assert f"the crawl kept its pages in {workdir}: add --workdir {workdir}" in bare.stderr


def test_a_polite_crawl_says_why_it_runs_below_its_concurrency(
        phones_topic, sandbox, tmp_path, capfd):
    """A delay of 1 s per host and 8 fetch slots: the progress line says hosts are waiting
    out their politeness delay (and so does crawl.log), rather than a bare low rate."""
    run_crawl(phones_topic, {"proxy": sandbox.proxy_url, "politeness_delay": 1.0,
                             "max_pages": 16, "concurrency": 8, "robots_retry_after": 0.5},
              workdir=tmp_path / "w", progress=True)
    bar = capfd.readouterr().err
    assert re.search(r"frontier=\d+, waiting for \d+ busy hosts? \(politeness\)", bar), bar
    log = (tmp_path / "w" / "crawl.log").read_text(encoding="utf-8")
    assert re.search(r"INFO jlse.progress: below concurrency: waiting for \d+ busy host", log)


def test_log_level_option(tmp_path):
    topic = tmp_path / "t"
    topic.mkdir()
    (topic / "seeds.txt").write_text("http://127.0.0.1:9/\n")  # discard port: refused
    args = ["crawl", "--topic", str(topic), "--workdir", str(tmp_path / "w"), "--no-progress",
            "--set", "allow_private=true", "--set", "max_retries=0",
            "--set", "robots_unavailable_retries=0"]
    quiet = jlse("--log-level", "error", *args)
    assert "WARNING" not in quiet.stderr and "error: no page was fetched" in quiet.stderr
    chatty = jlse("--log-level", "INFO", *args, "--fresh")
    assert "INFO jlse.run: new crawl of topic t" in chatty.stderr


def test_rates_after_resume_are_this_sessions(phones_topic, sandbox, tmp_path):
    overrides = {"proxy": sandbox.proxy_url, "strategy": "bfs", "politeness_delay": 0.02,
                 "max_pages": 10}
    run_crawl(phones_topic, overrides, workdir=tmp_path / "w", progress=False)
    summary = run_crawl(phones_topic, dict(overrides, max_pages=16), workdir=tmp_path / "w",
                        resume=True, progress=False)
    assert (summary.fetched, summary.fetched_before, summary.session_fetched) == (16, 10, 6)
    assert summary.pages_per_second == pytest.approx(6 / summary.elapsed)
    assert "6 in this session" in summary.render()
    done = run_crawl(phones_topic, overrides, workdir=tmp_path / "w", resume=True,
                     progress=False)  # the budget was reached already
    assert done.session_fetched == 0 and done.pages_per_second == 0.0


def test_the_summary_tells_of_urls_deferred_for_a_shard_that_was_down():
    summary = CrawlSummary(reason="page budget reached", fetched=5, relevant=2, targets=1,
                           elapsed=1.0, frontier_left=0, store_url="postgresql:///c")
    assert "deferred" not in summary.render()
    summary.deferred = 3
    assert "deferred        3  (found while their shard was down" in summary.render()


# --- topic files in other encodings ----------------------------------------------------------
def _topic(tmp_path: Path, seeds: bytes, toml: bytes | None = None) -> Path:
    topic = tmp_path / "enc"
    topic.mkdir()
    (topic / "seeds.txt").write_bytes(seeds)
    if toml is not None:
        (topic / "topic.toml").write_bytes(toml)
    return topic


def test_seeds_and_toml_with_a_utf8_byte_order_mark(tmp_path):
    topic = _topic(tmp_path, b"\xef\xbb\xbfhttp://a.test/\n", b"\xef\xbb\xbfmax_pages = 9\n")
    loaded = load_topic(topic)
    assert loaded.seeds == ["http://a.test/"] and loaded.settings.max_pages == 9


def test_utf16_seeds_with_a_byte_order_mark(tmp_path):
    topic = _topic(tmp_path, "# seeds\nhttp://a.test/x\n".encode("utf-16"))
    assert load_topic(topic).seeds == ["http://a.test/x"]


def test_latin1_seeds_name_the_file(tmp_path):
    topic = _topic(tmp_path, "# café\nhttp://a.test/\n".encode("latin-1"))
    with pytest.raises(TopicError, match="seeds.txt: not UTF-8"):
        load_topic(topic)
    done = jlse("crawl", "--topic", str(topic), "--no-progress")
    assert done.returncode == 2
    assert done.stderr.splitlines()[0].startswith(f"error: {topic / 'seeds.txt'}: not UTF-8")


# --- installation ----------------------------------------------------------------------------
def _make_dry_run(target: str) -> str:
    done = subprocess.run(["make", "-n", "-B", target, "VENV=/nonexistent-venv"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_install_leaves_out_the_development_tools():
    install = _make_dry_run("install")
    assert "-e '.[distributed]'" in install and "[dev]" not in install
    assert "-e '.[dev]'" in _make_dry_run("dev")
    assert "make dev" in (ROOT / ".ci" / "run").read_text()
    assert "Python 3.10 or newer" in install  # the version check says what it needs


def test_sandbox_serve_prints_a_proxy_and_a_search_url_that_work():
    """Scripts (benchmarks, users) take HTTP_PROXY=... and --search ... from the first line."""
    import requests

    server = subprocess.Popen([sys.executable, "-m", "jlse.cli", "sandbox", "serve", "--port",
                               "0", "--discovery"], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        words = line.split()
        proxy = next(word for word in words if word.startswith("HTTP_PROXY=")).split("=", 1)[1]
        search = words[words.index("--search") + 1].rstrip(")")
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", proxy), line
        assert search == proxy, line
        page = requests.get("http://camera-club.test/", proxies={"http": proxy}, timeout=30)
        assert page.status_code == 200
        answer = requests.get(f"{search}/search", params={"q": "camera", "format": "json"},
                              timeout=60)
        assert answer.json()["results"], answer.text[:200]
    finally:
        server.terminate()
        server.wait(timeout=30)
