"""Every user-facing failure of the ``jlse`` command is one clear line and a documented exit
code (``jlse.errors``), never a traceback unless ``-v`` asks for it. Each test runs the real
command in a subprocess and checks the exit code and the first line of standard error."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg2
import pytest

from jlse.errors import (
    EXIT_INTERNAL,
    EXIT_UNAVAILABLE,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    explain,
)

REDIS = os.environ.get("JLSE_TEST_REDIS", "redis://127.0.0.1:6379/0")


def jlse(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
         **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jlse.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, **kwargs)


def first_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.splitlines()
    return lines[0] if lines else ""


def assert_one_line_error(done: subprocess.CompletedProcess, code: int, *words: str) -> str:
    line = first_line(done)
    assert done.returncode == code, done.stderr
    assert line.startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) <= 2, done.stderr
    for word in words:
        assert word in line, (word, line)
    return line


def free_port() -> int:
    """A loopback port nobody listens on (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def topic(tmp_path: Path) -> Path:
    """A topic whose only seed is a closed loopback port: nothing can be reached."""
    path = tmp_path / "topic"
    path.mkdir()
    (path / "seeds.txt").write_text(f"http://127.0.0.1:{free_port()}/\n")
    (path / "topic.toml").write_text('keywords = ["phone"]\n')  # no "not classified" warning
    return path


# --- services that are not there ---------------------------------------------------------
def test_store_naming_a_missing_postgresql_database(topic, pg_database_url, tmp_path):
    """Read (export) from a database that does not exist: one line. A crawl creates it, as
    the README's distributed quick start expects (`--store .../jlse` on a fresh server)."""
    name = f"jlse_missing_{uuid.uuid4().hex[:8]}"
    missing = pg_database_url.rsplit("/", 1)[0] + f"/{name}"
    done = jlse("export", "--store", missing, "--all", "--out", str(tmp_path / "x.jsonl"))
    assert_one_line_error(done, EXIT_UNAVAILABLE, "cannot connect to PostgreSQL", "does not exist")
    jlse("crawl", "--topic", str(topic), "--workdir", str(tmp_path / "w"), "--store", missing,
         "--no-progress", "--max-pages", "1")
    admin = psycopg2.connect(pg_database_url)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            assert cur.fetchone() == (1,)
            cur.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        admin.close()


def test_store_on_an_unreachable_postgresql_server(topic, tmp_path):
    done = jlse("crawl", "--topic", str(topic), "--workdir", str(tmp_path / "w"), "--store",
                f"postgresql://postgres@127.0.0.1:{free_port()}/jlse", "--no-progress")
    assert_one_line_error(done, EXIT_UNAVAILABLE, "cannot connect to PostgreSQL")


def test_frontier_with_redis_unreachable_at_start(topic, pg_database_url):
    done = jlse("crawl", "--topic", str(topic), "--store", pg_database_url, "--no-progress",
                "--frontier", f"redis://127.0.0.1:{free_port()}/0")
    assert_one_line_error(done, EXIT_UNAVAILABLE, "cannot reach Redis")


def test_status_with_redis_unreachable():
    done = jlse("status", "--frontier", f"redis://127.0.0.1:{free_port()}/0")
    assert_one_line_error(done, EXIT_UNAVAILABLE, "cannot reach Redis")


def test_verbose_adds_the_traceback():
    done = jlse("-v", "status", "--frontier", f"redis://127.0.0.1:{free_port()}/0")
    assert done.returncode == EXIT_UNAVAILABLE
    assert "Traceback" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("error: cannot reach Redis")


def test_distributed_mode_without_its_extra(topic, tmp_path, pg_database_url):
    """Installed without jlse[distributed]: importing redis fails; the error says what to
    install."""
    shadow = tmp_path / "no-redis" / "redis"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'redis'\", name='redis')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(shadow.parent), *filter(None, [os.environ.get("PYTHONPATH")])]))
    done = jlse("crawl", "--topic", str(topic), "--store", pg_database_url, "--frontier",
                REDIS, env=env)
    assert_one_line_error(done, EXIT_UNAVAILABLE, "pip install 'jlse[distributed]'")


# --- files and ports ---------------------------------------------------------------------
def test_workdir_naming_an_existing_file(topic, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    done = jlse("crawl", "--topic", str(topic), "--workdir", str(a_file), "--no-progress")
    assert_one_line_error(done, EXIT_USAGE, str(a_file), "not a directory")


def test_resume_and_fresh_together_are_refused_before_anything_is_deleted(topic, tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "crawl.db").write_bytes(b"kept")
    done = jlse("crawl", "--topic", str(topic), "--workdir", str(workdir), "--resume", "--fresh")
    assert_one_line_error(done, EXIT_USAGE, "--resume and --fresh together")
    assert (workdir / "crawl.db").read_bytes() == b"kept"


def test_export_into_a_missing_folder(tmp_path):
    from jlse.scheduler.store import open_store

    open_store(f"sqlite:///{tmp_path / 'crawl.db'}").close()
    out = tmp_path / "no-such-folder" / "pages.csv"
    done = jlse("export", "--workdir", str(tmp_path), "--out", str(out))
    assert_one_line_error(done, EXIT_UNAVAILABLE, str(out), "No such file or directory")


def test_sandbox_serve_on_a_busy_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = jlse("sandbox", "serve", "--port", str(port), timeout=60)
    assert_one_line_error(done, EXIT_UNAVAILABLE, f"127.0.0.1:{port}", "in use")


def test_sandbox_serve_on_an_invalid_port():
    done = jlse("sandbox", "serve", "--port", "99999", timeout=60)
    assert_one_line_error(done, EXIT_USAGE, "--port", "0-65535")


@pytest.mark.parametrize("args, said", [
    ([], "error: give a topic name: jlse sandbox topic NAME, NAME one of phones, cameras, "
         "laptops"),
    (["tablets"], "error: unknown topic 'tablets': jlse sandbox topic NAME, NAME one of phones"),
])
def test_sandbox_topic_without_a_known_name_lists_them(args, said, tmp_path):
    done = jlse("sandbox", "topic", *args, "--out", str(tmp_path / "t"), timeout=60)
    assert assert_one_line_error(done, EXIT_USAGE).startswith(said)
    assert not (tmp_path / "t").exists()


def test_seeds_with_several_bad_lines_are_all_reported(tmp_path):
    topic = tmp_path / "topic"
    topic.mkdir()
    lines = ["# seeds", "http://a.test/", "ftp://b.test/", "", "www.c.test", "http://d.test/",
             *[f"not a url {n}" for n in range(6)]]
    (topic / "seeds.txt").write_text("\n".join(lines) + "\n")
    done = jlse("crawl", "--topic", str(topic), "--workdir", str(tmp_path / "w"), timeout=60)
    line = assert_one_line_error(done, EXIT_USAGE, "seeds.txt: 8 lines are not http(s) URLs")
    assert "line 3: 'ftp://b.test/'; line 5: 'www.c.test'; line 7: 'not a url 0'" in line
    assert line.endswith("line 9: 'not a url 2'; and 3 more"), line
    assert not (tmp_path / "w" / "crawl.db").exists()


def test_output_reader_going_away_is_quiet():
    """`jlse ... | head`: the reader closes the pipe early; exit 0, nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "jlse.cli", "sandbox", "truth", "--out",
                             "/dev/stdout"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert err.decode() == ""


# --- --set ---------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [
    ["crawl", "--topic", "{topic}"],
    ["crawl", "--topic", "{topic}", "--frontier", REDIS, "--store", "postgresql://x@127.0.0.1/x"],
    ["demo"],
    ["eval"],
])
def test_set_with_a_wrong_type_names_the_key(command, topic):
    args = [arg.format(topic=topic) for arg in command]
    done = jlse(*args, "--set", "max_pages=abc", timeout=60)
    assert_one_line_error(done, EXIT_USAGE, "max_pages", "expected an integer", "'abc'")


def test_set_with_an_unknown_key():
    done = jlse("demo", "--set", "max_pagez=3", timeout=60)
    assert_one_line_error(done, EXIT_USAGE, "max_pagez", "unknown setting")


# --- nothing reachable --------------------------------------------------------------------
def test_a_crawl_that_reaches_no_seed_host_exits_4(topic, tmp_path):
    done = jlse("crawl", "--topic", str(topic), "--workdir", str(tmp_path / "w"), "--no-progress",
                "--set", "allow_private=true", "--set", "max_retries=0",
                "--set", "robots_unavailable_retries=0")
    assert done.returncode == EXIT_UNREACHABLE, done.stderr
    assert done.stderr.splitlines()[-1].startswith("error: no page was fetched: no seed host"), \
        done.stderr
    assert "Traceback" not in done.stderr


def test_unreachable_seeds_end_the_crawl_in_seconds_with_the_default_retries(tmp_path):
    """Two seed hosts that are not there (a closed port, a name not found): the default two
    retries of each are seconds apart, not robots_retry_after (60 s) apart."""
    topic = tmp_path / "topic"
    topic.mkdir()
    (topic / "seeds.txt").write_text(f"http://127.0.0.1:{free_port()}/\n"
                                     "http://no-such-host.invalid/\n")
    done = jlse("crawl", "--topic", str(topic), "--workdir", str(tmp_path / "w"),
                "--no-progress", "--json", "--set", "allow_private=true")
    assert done.returncode == EXIT_UNREACHABLE, done.stderr
    assert done.stderr.splitlines()[-1].startswith("error: no page was fetched"), done.stderr
    summary = json.loads(done.stdout)
    assert summary["outcomes"] == {"robots_unavailable": 2}
    # the crawl's own time (not the interpreter's start, which a loaded machine stretches):
    # 10 s of retries; 120 s before
    assert summary["elapsed"] < 25, summary["elapsed"]


def _stderr_until(proc: subprocess.Popen, text: str, timeout: float) -> float:
    """Seconds until ``text`` appeared on the process's stderr (fails after ``timeout``)."""
    started = time.monotonic()
    seen = []
    while time.monotonic() - started < timeout:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return time.monotonic() - started
    pytest.fail(f"{text!r} not on stderr within {timeout} s: {''.join(seen)}")


def test_unreachable_seeds_are_said_early(topic, tmp_path):
    """Retries would take minutes: the warning comes after the first failure of every seed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jlse.cli", "crawl", "--topic", str(topic), "--workdir",
         str(tmp_path / "w"), "--no-progress", "--set", "allow_private=true", "--set",
         "max_retries=0", "--set", "robots_retry_after=120"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        assert _stderr_until(proc, "no seed host could be reached so far", 60) < 60
    finally:
        _interrupt(proc)
    assert proc.returncode == 130


def test_distributed_crawl_without_dispatcher_or_worker_says_so(tmp_path, pg_store_url):
    prefix = f"jlsetest{uuid.uuid4().hex[:8]}:"
    topic = tmp_path / "topic"
    topic.mkdir()
    (topic / "seeds.txt").write_text("http://a.test/\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jlse.cli", "crawl", "--topic", str(topic), "--no-progress",
         "--store", pg_store_url, "--frontier", REDIS, "--crawl-id", "silence"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1", JLSE_KEY_PREFIX=prefix))
    try:
        _stderr_until(proc, "is the dispatcher running?", 60)
        _stderr_until(proc, "no fetch worker answered", 30)
    finally:
        _interrupt(proc)
        _delete_keys(prefix)
    assert proc.returncode == 130


def _interrupt(proc: subprocess.Popen) -> None:
    """Ctrl+C for a crawl; one that does not end within a minute is killed (a crawl left
    running would go on using the session's services) and the test fails."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the crawl did not end within 60 s of Ctrl+C")


def _delete_keys(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS)
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        client.unlink(*keys)
    client.close()


# --- the classification itself ----------------------------------------------------------
def test_an_unexpected_error_is_an_internal_error_line():
    code, message = explain(RuntimeError("boom\nsecond line"))
    assert code == EXIT_INTERNAL
    assert message.startswith("internal error: RuntimeError: boom") and "\n" not in message
    assert "-v" in message
