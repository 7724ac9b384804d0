"""The page repository: md5 names, gzip, atomic writes."""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import os
import threading

import pytest

from jlse.scheduler.store import PageRepository
from jlse.scheduler.store import pages as pages_module


@pytest.fixture()
def repo(tmp_path) -> PageRepository:
    return PageRepository(tmp_path / "pages")


def stored_files(repo: PageRepository) -> list[str]:
    return sorted(p.name for p in repo.root.rglob("*") if p.is_file())


def test_files_are_named_by_the_md5_of_the_url(repo):
    url = "http://例子.test/新闻?q=1"
    digest = hashlib.md5(url.encode("utf-8")).hexdigest()
    assert repo.path_for(url) == repo.root / digest[:2] / f"{digest}.gz"
    assert repo.save(url, b"<html></html>") == repo.path_for(url)
    assert stored_files(repo) == [f"{digest}.gz"]


def test_round_trip_overwrite_and_missing(repo):
    assert repo.load("http://a.test/") is None and "http://a.test/" not in repo
    repo.save("http://a.test/", b"first")
    repo.save("http://a.test/", b"second")
    assert repo.load("http://a.test/") == b"second" and "http://a.test/" in repo
    assert "http://b.test/" not in repo and 42 not in repo


@pytest.mark.parametrize("body", [bytes(range(256)) * 40, b"", "中文页面".encode("gb18030")])
def test_binary_bodies_are_stored_exactly_and_gzipped(repo, body):
    path = repo.save("http://a.test/bin", body)
    assert repo.load("http://a.test/bin") == body
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress(path.read_bytes()) == body


def test_compressible_pages_take_less_disk(repo):
    body = b"<p>the same paragraph again</p>" * 2000
    assert repo.save("http://a.test/", body).stat().st_size < len(body) / 10


def _failing_replace(*args, **kwargs):
    raise OSError("disk full (simulated)")


class _HalfWriter(io.BufferedWriter):
    def write(self, data):  # writes half, then the disk "fails"
        super().write(bytes(data)[: len(data) // 2])
        raise OSError("disk full (simulated)")


def _half_fdopen(fd, mode="r", *args, **kwargs):
    return _HalfWriter(io.FileIO(fd, "wb"))


@pytest.mark.parametrize("failure", ["replace", "write"])
def test_a_failed_save_leaves_no_partial_file(repo, monkeypatch, failure):
    url = "http://a.test/page"
    repo.save(url, b"old version")
    if failure == "replace":
        monkeypatch.setattr(pages_module.os, "replace", _failing_replace)
    else:
        monkeypatch.setattr(pages_module.os, "fdopen", _half_fdopen)
    with pytest.raises(OSError, match="simulated"):
        repo.save(url, b"new version " * 1000)
    with pytest.raises(OSError):
        repo.save("http://a.test/never", b"x" * 1000)
    monkeypatch.undo()
    assert repo.load(url) == b"old version"
    assert "http://a.test/never" not in repo
    assert stored_files(repo) == [repo.path_for(url).name]  # no temporary files left


def test_readers_never_see_a_partial_page(repo):
    bodies = [os.urandom(50_000), os.urandom(80_000)]
    url = "http://a.test/busy"
    repo.save(url, bodies[0])
    done = threading.Event()
    seen: list[bytes | None] = []

    def read() -> None:
        while not done.is_set():
            seen.append(repo.load(url))

    reader = threading.Thread(target=read)
    reader.start()
    for n in range(30):
        repo.save(url, bodies[n % 2])
    done.set()
    reader.join(10)
    assert seen and all(body in bodies for body in seen)


def test_a_corrupt_file_loads_as_none_with_a_warning(repo, caplog):
    path = repo.save("http://a.test/", b"fine")
    path.write_bytes(b"\x1f\x8b not really gzip")
    with caplog.at_level(logging.WARNING):
        assert repo.load("http://a.test/") is None
    assert "unreadable" in caplog.text
