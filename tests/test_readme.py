"""The README's shell blocks, run in order the way doc tests run, so that an example that fails,
collides with another or litters the checkout fails the suite.

How it runs them:

- **A fresh checkout.** The repository is cloned (``git clone`` of this checkout's HEAD) into a
  scratch folder, and the working tree's README.md is copied over the clone's, so an uncommitted
  README is what is tested. Nothing from this checkout's ``runs/`` or caches is there.
- **No install.** ``make install`` is marked as not run (below). The clone's ``.venv/bin/jlse``
  and ``.venv/bin/python`` are two-line shell scripts that run this test session's interpreter
  (``python -m jlse.cli``, ``python``): a symlink to a virtual environment's python would not
  find that environment's packages, and a real ``.venv/`` folder is what the README's commands
  and ``.gitignore`` expect.
- **One block, one shell.** Each block runs as ``bash -e -o pipefail`` in the clone, in a process
  group of its own that is killed afterwards (a sandbox left in the background by a failing
  block goes with it). A command that exits non-zero fails the test with the block's output.
- **Three adaptations**, all to run unattended on a shared machine: the README's sandbox ports
  (8899, 8898) become free ports; after a line that starts ``jlse sandbox serve ... &`` the
  test waits for its port (a person waits for the server's banner); and a page budget
  ``--max-pages N`` above ``MAX_PAGES`` runs as ``MAX_PAGES`` (the README shows the budgets a
  user would choose; ``jlse demo`` runs as written).
- **Every block is accounted for.** A fenced block is run (``sh``, ``bash``, ``shell``), or is
  not code (``text``, ``toml``, ``json``...), or follows the marker ``<!-- readme-test: skip
  (why) -->`` (invisible on GitHub: installing, a cluster, Ctrl+C); any other block fails.
- **Nothing litters.** After the last block the clone has no untracked file that .gitignore does
  not cover: the examples write under ``runs/`` only.

The distributed quick start is marked: ``make cluster-up`` and a crawl with ``--frontier`` are
what ``tests/test_cluster_scripts.py`` and ``tests/test_distributed.py`` run.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = {"sh", "bash", "shell"}
NOT_CODE = {"text", "toml", "json", "jsonl", "csv", "ini", "tsv"}
SKIP_MARK = re.compile(r"^<!--\s*readme-test:\s*skip\b.*-->\s*$")
README_PORTS = ("8899", "8898")
MAX_PAGES = 100
BLOCK_TIMEOUT = 300

pytestmark = pytest.mark.slow


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    info: str
    code: str
    skipped: bool


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text`` in order, each with whether a skip marker precedes it."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        fence = re.match(r"^(```+|~~~+)\s*(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence.group(1)):
            body.append(lines[i])
            i += 1
        before = [line for line in lines[:start] if line.strip()]
        skipped = bool(before) and bool(SKIP_MARK.match(before[-1].strip()))
        blocks.append(Block(start + 1, fence.group(2).lower(), "\n".join(body) + "\n", skipped))
        i += 1
    return blocks


def unaccounted(blocks: list[Block]) -> list[str]:
    return [f"README.md:{b.line}: a ```{b.info or '(no language)'} block that is neither run "
            "(sh) nor marked <!-- readme-test: skip (why) --> nor text/toml"
            for b in blocks if not b.skipped and b.info not in RUN | NOT_CODE]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


WAIT_FOR_PORT = """readme_wait_for_port() {  # added by tests/test_readme.py
  for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done
  echo "nothing listens on port $1" >&2; return 1
}
"""


def adapt(code: str, ports: dict[str, str]) -> str:
    """The block as the test runs it: free ports, a wait after a server started in the
    background, page budgets capped (module docstring)."""
    for old, new in ports.items():
        code = code.replace(old, new)
    code = re.sub(r"--max-pages (\d+)",
                  lambda m: f"--max-pages {min(int(m.group(1)), MAX_PAGES)}", code)
    out = []
    for line in code.splitlines():
        out.append(line)
        serve = re.search(r"jlse sandbox serve\b.*--port (\d+).*&", line)
        if serve:
            out.append(f"readme_wait_for_port {serve.group(1)}")
    return WAIT_FOR_PORT + "\n".join(out) + "\n"


def fresh_checkout(dest: Path) -> Path:
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(dest)], check=True, timeout=120)
    shutil.copyfile(ROOT / "README.md", dest / "README.md")
    shutil.copyfile(ROOT / ".gitignore", dest / ".gitignore")
    bin_dir = dest / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, command in (("jlse", f'"{sys.executable}" -m jlse.cli'),
                          ("python", f'"{sys.executable}"')):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        script.chmod(0o755)
    return dest


def run_block(block: Block, code: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", code], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"README.md:{block.line}: still running after {BLOCK_TIMEOUT} s:\n{out}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def untracked(checkout: Path) -> list[str]:
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                            cwd=checkout, capture_output=True, text=True, check=True).stdout
    return [line[3:] for line in status.splitlines() if line.startswith("??")]


def test_every_readme_block_is_run_or_marked() -> None:
    blocks = readme_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert [b for b in blocks if b.info in RUN and not b.skipped], "no shell block to run"
    assert unaccounted(blocks) == []


def test_a_block_neither_run_nor_marked_is_reported() -> None:
    text = "```sh\ntrue\n```\n\n<!-- readme-test: skip (a cluster) -->\n```sh\nmake x\n```\n" \
           "```\nplain\n```\n```python\nprint()\n```\n"
    blocks = readme_blocks(text)
    assert [(b.info, b.skipped) for b in blocks] == [
        ("sh", False), ("sh", True), ("", False), ("python", False)]
    assert [line.split(":")[1] for line in unaccounted(blocks)] == ["9", "12"]


def test_the_adaptations_are_only_ports_waits_and_budgets() -> None:
    code = ".venv/bin/jlse sandbox serve --port 8899 &   # x\n" \
           ".venv/bin/jlse crawl --topic t/ --max-pages 300 --set proxy=http://127.0.0.1:8899\n" \
           ".venv/bin/jlse crawl --topic t/ --max-pages 50\n"
    adapted = adapt(code, {"8899": "40001"}).split("}\n", 1)[1]
    assert adapted == ".venv/bin/jlse sandbox serve --port 40001 &   # x\n" \
        "readme_wait_for_port 40001\n" \
        f".venv/bin/jlse crawl --topic t/ --max-pages {MAX_PAGES} " \
        "--set proxy=http://127.0.0.1:40001\n" \
        ".venv/bin/jlse crawl --topic t/ --max-pages 50\n"


@pytest.mark.timeout(900)
def test_the_readme_examples_run_in_order_in_a_fresh_checkout(tmp_path) -> None:
    checkout = fresh_checkout(tmp_path / "jlse")
    blocks = readme_blocks((checkout / "README.md").read_text(encoding="utf-8"))
    assert unaccounted(blocks) == []
    ports = {port: str(free_port()) for port in README_PORTS}
    for block in blocks:
        if block.skipped or block.info not in RUN:
            continue
        done = run_block(block, adapt(block.code, ports), checkout)
        assert done.returncode == 0, \
            f"README.md:{block.line}: exit {done.returncode}\n{block.code}\n--- output:\n" \
            f"{done.stdout[-6000:]}"
    assert untracked(checkout) == [], "the examples wrote outside runs/ (or .gitignore lacks it)"
