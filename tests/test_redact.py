"""Credentials never shown or stored (issue 15): ``jlse.redact`` and every place a URL goes.

A store URL with a password in its user info and in a ``?password=`` parameter, and a proxy URL
with a password, are used for real crawls (PostgreSQL trusts local connections, so the password
is accepted and ignored); then the terminal, summary.json, crawl.log, the crawl database's meta
table and the crawl config in Redis are searched for the secrets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg2
import pytest

from jlse.redact import is_secret_parameter, redact_url, strip_credentials, without_credentials

REPO = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("JLSE_TEST_REDIS", "redis://127.0.0.1:6379/0")
SECRET_USERINFO, SECRET_PARAM, SECRET_PROXY = "pw-in-userinfo-41", "pw-in-param-42", "px-43"
SECRETS = (SECRET_USERINFO, SECRET_PARAM, SECRET_PROXY)


@pytest.mark.parametrize(
    ("url", "shown", "stored"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db", "postgresql://u@h:5432/db"),
        ("postgresql://u@h/db?password=pw&options=-csearch_path%3Dt",
         "postgresql://u@h/db?password=***&options=-csearch_path%3Dt",
         "postgresql://u@h/db?options=-csearch_path%3Dt"),
        ("https://h/x?a=1&access_token=t&API_KEY=k&passwd=p&client_secret=s#f",
         "https://h/x?a=1&access_token=***&API_KEY=***&passwd=***&client_secret=***#f",
         "https://h/x?a=1#f"),
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0", "redis://h:6379/0"),
        ("http://user:p%40ss@proxy:3128", "http://user:***@proxy:3128", "http://user@proxy:3128"),
        ("sqlite:////tmp/crawl.db", "sqlite:////tmp/crawl.db", "sqlite:////tmp/crawl.db"),
        ("host=h password=pw dbname=x", "host=h password=*** dbname=x",
         "host=h password= dbname=x"),
        ("http://[::1", "http://***", "http://***"),  # not parsable: only the scheme is shown
        ("", "", ""),
    ],
)
def test_redact_and_strip(url: str, shown: str, stored: str) -> None:
    assert redact_url(url) == shown
    assert strip_credentials(url) == stored
    assert redact_url(shown) == shown  # idempotent


@pytest.mark.parametrize("name", ["password", "PassWord", "pwd", "pass", "sslpassword", "token",
                                  "access_token", "api-key", "apikey", "secret", "x_secret"])
def test_secret_parameter_names(name: str) -> None:
    assert is_secret_parameter(name)


@pytest.mark.parametrize("name", ["options", "sslmode", "q", "page", "passage", "id"])
def test_ordinary_parameter_names(name: str) -> None:
    assert not is_secret_parameter(name)


def test_without_credentials_strips_every_url_value() -> None:
    values = {"proxy": "http://u:pw@p:1", "name": "x:y@z", "max_pages": 5}
    assert without_credentials(values) == {"proxy": "http://u@p:1", "name": "x:y@z",
                                           "max_pages": 5}


# --- every place, with real crawls -------------------------------------------------------------

def _secret_store_url(pg_store_url: str) -> str:
    assert "postgres@" in pg_store_url
    return (pg_store_url.replace("postgres@", f"postgres:{SECRET_USERINFO}@", 1)
            + f"&password={SECRET_PARAM}")


def _secret_proxy(sandbox) -> str:
    return sandbox.proxy_url.replace("http://", f"http://jlse:{SECRET_PROXY}@", 1)


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def _meta_values(pg_store_url: str) -> str:
    schema = pg_store_url.rsplit("%3D", 1)[1]
    with psycopg2.connect(pg_store_url.split("?", 1)[0]) as conn, conn.cursor() as cur:
        cur.execute(f'SELECT key, value FROM "{schema}".meta')
        return json.dumps(cur.fetchall())


def _crawl(topic: Path, store_url: str, workdir: Path, proxy: str, *more: str
           ) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "jlse.cli", "crawl", "--topic", str(topic), "--max-pages", "5",
           "--strategy", "bfs", "--store", store_url, "--workdir", str(workdir), "--no-progress",
           "--set", f"proxy={proxy}", "--set", "politeness_delay=0", *more]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


@pytest.fixture(scope="module")
def topic(sandbox_web, tmp_path_factory) -> Path:
    return sandbox_web.write_topic_dir("phones", tmp_path_factory.mktemp("t") / "phones",
                                       n_samples=4)


def test_embedded_crawl_shows_and_stores_no_secret(topic, pg_store_url, sandbox, tmp_path):
    store_url, workdir = _secret_store_url(pg_store_url), tmp_path / "w"
    first = _crawl(topic, store_url, workdir, _secret_proxy(sandbox))
    assert first.returncode == 0, first.stderr[-2000:]
    assert "crawl database" in first.stdout and "***" in first.stdout  # the summary
    summary_json = (workdir / "summary.json").read_text()
    assert "***" in json.loads(summary_json)["store_url"]
    again = _crawl(topic, store_url, workdir, _secret_proxy(sandbox), "--json")  # no --resume
    assert again.returncode != 0
    assert "already holds a crawl" in again.stderr and "Traceback" not in again.stderr
    for place, text in [("summary", first.stdout), ("stderr", first.stderr),
                        ("summary.json", summary_json), ("second run", again.stderr),
                        ("crawl.log", (workdir / "crawl.log").read_text()),
                        ("meta table", _meta_values(pg_store_url))]:
        assert _leaks(text) == [], place


def test_distributed_registration_stores_no_secret(topic, pg_store_url, sandbox, registry,
                                                   monkeypatch):
    from jlse.cluster import register_crawl

    monkeypatch.setenv("JLSE_KEY_PREFIX", registry.root)
    crawl_id = register_crawl(topic, {"strategy": "bfs", "proxy": _secret_proxy(sandbox)},
                              _secret_store_url(pg_store_url), REDIS_URL, "redact")
    raw = registry.client.get(registry.prefix(crawl_id) + "config").decode()
    config = json.loads(raw)
    assert config["store_url"] == pg_store_url  # without password; the rest kept
    assert config["settings"]["proxy"] == sandbox.proxy_url.replace("http://", "http://jlse@")
    assert _leaks(raw) == []
    assert _leaks(_meta_values(pg_store_url)) == []
