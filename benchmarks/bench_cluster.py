"""Distributed crawl throughput with 1, 2 and 4 fetch workers, and the embedded crawl for reference.

The sandbox web runs in its own process with 20 ms latency per response; every crawl is
breadth-first (``bfs``) with politeness off (``politeness_delay=0``, ``max_crawl_delay=0``) and
the same page budget. Distributed mode: a fresh dispatcher and N ``jlse worker --concurrency C``
processes (Celery prefork: each has C child processes, one task at a time each; C = 4 by default),
the crawl's ``concurrency`` set to N x C so the dispatcher keeps 2 x N x C tasks outstanding.
Redis keys live under a private ``JLSE_KEY_PREFIX`` and PostgreSQL in a private database (one
schema per run), both removed afterwards.

    .venv/bin/python benchmarks/bench_cluster.py            # 600 pages, 1/2/4 workers
    .venv/bin/python benchmarks/bench_cluster.py --quick    # 300 pages, 1/2 workers

Figures per run: end-to-end pages/s (fetched / wall time of ``jlse crawl``, registration and
worker warm-up included), steady pages/s (from the pages' fetch times, first and last 5 % cut)
and the machine's CPU use during the run (/proc/stat; 2 cores here, so the scaling stops where
the CPU is full). Then CPU ms per fetched page by role over the same window: the dispatcher, the
Celery worker parents and their pool children (the process groups started here, from
/proc/<pid>/stat), the PostgreSQL backends of the benchmark's database, redis-server (INFO cpu:
the whole server, other clients included), the sandbox server and the ``jlse crawl`` client
(rusage); "machine" is all CPU time of the machine, "other" what no role accounts for (other
work on a shared machine). Results go to ``benchmarks/results/cluster.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from jlse.scheduler.store import open_store  # noqa: E402

JLSE = [sys.executable, "-m", "jlse.cli"]
RESULTS = ROOT / "benchmarks" / "results" / "cluster.json"
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PG_ADMIN_URL = os.environ.get("JLSE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
TAG = uuid.uuid4().hex[:8]
KEY_PREFIX = f"jlsebench{TAG}:"
START_TIMEOUT = 120.0
CRAWL_TIMEOUT = 600.0


WORKER_ENV: dict[str, str] = {}  # a worker's own proxy and database (never from Redis)


def role_env() -> dict[str, str]:
    env = dict(os.environ, REDIS_URL=REDIS_URL, JLSE_KEY_PREFIX=KEY_PREFIX, PYTHONUNBUFFERED="1",
               **WORKER_ENV)
    env.pop("CELERY_BROKER_URL", None)  # the default: db 1 of REDIS_URL's server
    return env


# --- processes -------------------------------------------------------------------------------
class Roles:
    """The dispatcher and worker processes of one run (each in its own process group)."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *args: str, ready: str | None = None) -> None:
        with open(self.logdir / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                JLSE + list(args), cwd=ROOT, env=role_env(), stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        if ready:
            self._wait_for(name, ready)

    def _wait_for(self, name: str, text: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if text in self.tail(name):
                return
            if self.procs[name].poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not start:\n{self.tail(name)}")

    def tail(self, name: str) -> str:
        return (self.logdir / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(10)
        self.procs.clear()


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass


@contextmanager
def sandbox_server(latency: float, logdir: Path):
    """The sandbox web in its own process; yields (its proxy URL, its pid)."""
    logfile = logdir / "sandbox.log"
    with open(logfile, "w") as out:
        proc = subprocess.Popen(JLSE + ["sandbox", "serve", "--port", "0", "--latency",
                                        str(latency)], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield _wait_for_proxy(proc, logfile), proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def _wait_for_proxy(proc: subprocess.Popen, logfile: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        for word in logfile.read_text(errors="replace").split():
            if word.startswith("HTTP_PROXY="):
                return word.partition("=")[2].rstrip(";,.)")
        time.sleep(0.2)
    raise RuntimeError(f"sandbox did not start: {logfile.read_text(errors='replace')[-2000:]}")


# --- backends --------------------------------------------------------------------------------
@contextmanager
def private_database():
    """A PostgreSQL database private to this run of the benchmark; yields its URL."""
    import psycopg2

    name = f"jlse_bench_{TAG}"
    admin = psycopg2.connect(PG_ADMIN_URL, connect_timeout=5)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def new_schema(database_url: str, name: str) -> str:
    import psycopg2

    with psycopg2.connect(database_url) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{name}"')
    conn.close()
    return f"{database_url}?options=-csearch_path%3D{name}"


def clear_redis_prefix() -> None:
    """Delete this run's keys: registry, frontier and Q-tables (db 0) and broker keys (db 1)."""
    for url in (REDIS_URL, REDIS_URL.rsplit("/", 1)[0] + "/1"):
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=KEY_PREFIX + "*", count=1000))
        for start in range(0, len(keys), 1000):
            client.unlink(*keys[start:start + 1000])
        client.close()


# --- measuring -------------------------------------------------------------------------------
CLK_TCK = os.sysconf("SC_CLK_TCK")
ROLE_ORDER = ("dispatcher", "worker parents", "worker children", "postgres backends",
              "redis-server", "sandbox", "crawl client", "other", "machine")


def _proc_cpu(pid: str) -> tuple[int, float, str] | None:
    """(process group, CPU seconds of every thread, cmdline) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        with open(f"/proc/{pid}/cmdline", "rb") as cmd:
            cmdline = cmd.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # gone meanwhile
        return None
    return int(fields[2]), (int(fields[11]) + int(fields[12])) / CLK_TCK, cmdline


class CpuMeter:
    """CPU seconds per role between ``start`` and ``stop``.

    Roles are process groups (pgid -> name; the group leader is "<name> parent", the rest
    "<name> children"), the sandbox's pid, the PostgreSQL backends of ``database`` (matched by
    their process title), redis-server (INFO cpu), and this process's reaped children (the
    ``jlse crawl`` client: no other child is reaped while it runs). A process that exits during
    the window loses its CPU time from the count, so stop before stopping the roles.
    """

    def __init__(self, groups: dict[int, str], sandbox_pid: int | None = None,
                 database: str | None = None) -> None:
        self.groups, self.sandbox_pid, self.database = groups, sandbox_pid, database
        self._before: dict[tuple[str, int], float] = {}

    def _role(self, pid: int, pgid: int, cmdline: str) -> str | None:
        if pgid in self.groups:
            return f"{self.groups[pgid]} {'parent' if pid == pgid else 'children'}"
        if pid == self.sandbox_pid:
            return "sandbox"
        if self.database and cmdline.startswith("postgres: ") and f" {self.database} " in cmdline:
            return "postgres backends"
        return None

    def _sample(self) -> dict[tuple[str, int], float]:
        """(role, pid) -> CPU seconds so far; pid 0 for the whole-server figures."""
        sample: dict[tuple[str, int], float] = {}
        for entry in os.listdir("/proc"):
            found = _proc_cpu(entry) if entry.isdigit() else None
            role = found and self._role(int(entry), found[0], found[2])
            if role:
                sample[(role, int(entry))] = found[1]
        with redis.Redis.from_url(REDIS_URL) as client:
            info = client.info("cpu")
        sample[("redis-server", 0)] = info["used_cpu_user"] + info["used_cpu_sys"]
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        sample[("crawl client", 0)] = usage.ru_utime + usage.ru_stime
        busy, _ = cpu_ticks()
        sample[("machine", 0)] = busy / CLK_TCK
        return sample

    def start(self) -> None:
        self._before = self._sample()

    def stop(self) -> dict[str, float]:
        """CPU seconds per role since ``start`` ("other": machine minus every role)."""
        spent: dict[str, float] = {}
        for (role, pid), seconds in self._sample().items():
            spent[role] = spent.get(role, 0.0) + seconds - self._before.get((role, pid), 0.0)
        spent["other"] = spent["machine"] - sum(v for k, v in spent.items() if k != "machine")
        return spent


def cpu_by_role(spent: dict[str, float]) -> dict[str, float]:
    """Per-group figures summed into ``ROLE_ORDER``'s roles (worker1 parent -> worker parents)."""
    totals: dict[str, float] = {}
    for role, seconds in spent.items():
        if role.startswith("worker"):
            role = "worker parents" if role.endswith(" parent") else "worker children"
        elif role.startswith("dispatcher"):
            role = "dispatcher"
        totals[role] = totals.get(role, 0.0) + seconds
    return totals


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def steady_rate(store_url: str, trim: float = 0.05) -> float | None:
    """Pages per second between the fetch times at the trim and 1 - trim quantiles."""
    with open_store(store_url) as store:
        times = sorted(row["fetched_at"] for row in store.export_rows(min_relevance=None)
                       if row["fetched_at"])
    cut = int(len(times) * trim)
    times = times[cut:len(times) - cut]
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    return (len(times) - 1) / (times[-1] - times[0])


def timed_crawl(args: list[str], meter: CpuMeter, env: dict[str, str] | None = None) -> dict:
    """Run ``jlse crawl …``; its JSON summary plus wall time, machine CPU use and CPU seconds
    per role (``cpu_s``)."""
    busy0, total0 = cpu_ticks()
    meter.start()
    started = time.monotonic()
    done = subprocess.run(JLSE + args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=CRAWL_TIMEOUT, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - started
    spent = meter.stop()
    busy1, total1 = cpu_ticks()
    if done.returncode != 0:
        raise RuntimeError(f"jlse crawl failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    summary["wall"] = wall
    summary["cpu_busy"] = (busy1 - busy0) / max(total1 - total0, 1)
    summary["cpu_s"] = spent
    return summary


def crawl_args(topic: Path, pages: int, proxy: str, concurrency: int) -> list[str]:
    args = ["crawl", "--topic", str(topic), "--max-pages", str(pages), "--strategy", "bfs",
            "--no-progress", "--json"]
    settings = {"proxy": proxy, "politeness_delay": 0, "max_crawl_delay": 0,
                "store_pages": "false", "concurrency": concurrency}
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    return args


def result_row(label: str, summary: dict, store_url: str) -> dict:
    pages = max(summary["fetched"], 1)
    roles = cpu_by_role(summary["cpu_s"])
    return {"run": label, "fetched": summary["fetched"], "wall_s": round(summary["wall"], 2),
            "pages_per_s": round(summary["fetched"] / summary["wall"], 1),
            "steady_pages_per_s": _round(steady_rate(store_url)),
            "cpu_busy": round(summary["cpu_busy"], 2),
            "cpu_ms_per_page": {role: round(1000 * roles[role] / pages, 1)
                                for role in ROLE_ORDER if role in roles},
            "cpu_s_by_group": {k: round(v, 2) for k, v in sorted(summary["cpu_s"].items())}}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


# --- the runs --------------------------------------------------------------------------------
def run_distributed(n_workers: int, cfg: argparse.Namespace, topic: Path, sandbox: tuple,
                    database_url: str, logdir: Path) -> dict:
    label = f"cluster-{n_workers}w"
    store_url = new_schema(database_url, f"w{n_workers}")
    roles = Roles(logdir)
    try:
        for i in range(1, n_workers + 1):
            pool = ["--pool", cfg.pool] if cfg.pool else []
            roles.start(f"{label}-worker{i}", "worker", "--concurrency", str(cfg.worker_concurrency),
                        "--hostname", f"w{i}@{KEY_PREFIX[:-1]}", *pool, ready=" ready.")
        # -v: its "serving" line tells when its start-up (imports) is over
        roles.start(f"{label}-dispatcher", "-v", "dispatcher", ready="dispatcher serving crawls")
        groups = {proc.pid: name.removeprefix(f"{label}-") for name, proc in roles.procs.items()}
        meter = CpuMeter(groups, sandbox[1], database_url.rsplit("/", 1)[1])
        args = crawl_args(topic, cfg.pages, sandbox[0], n_workers * cfg.worker_concurrency)
        args += ["--store", store_url, "--frontier", REDIS_URL, "--crawl-id", label]
        summary = timed_crawl(args, meter, role_env())
    finally:
        roles.stop_all()
    return result_row(label, summary, store_url)


def run_embedded(concurrency: int, cfg: argparse.Namespace, topic: Path, sandbox: tuple,
                 workdir: Path) -> dict:
    args = crawl_args(topic, cfg.pages, sandbox[0], concurrency)
    args += ["--workdir", str(workdir / f"embedded-{concurrency}"), "--fresh"]
    summary = timed_crawl(args, CpuMeter({}, sandbox[1]))
    return result_row(f"embedded-c{concurrency}", summary, summary["store_url"])


def render(rows: list[dict]) -> str:
    base = next((r for r in rows if r["run"] == "cluster-1w"), None)
    lines = [f"{'run':<14} {'pages':>5} {'wall s':>7} {'pages/s':>8} {'steady':>7} "
             f"{'vs 1w':>6} {'CPU':>5}"]
    for row in rows:
        ratio = row["steady_pages_per_s"] / base["steady_pages_per_s"] \
            if base and base["steady_pages_per_s"] and row["steady_pages_per_s"] else None
        row["scaling_vs_1w"] = None if ratio is None else round(ratio, 2)
        lines.append(f"{row['run']:<14} {row['fetched']:>5} {row['wall_s']:>7.1f} "
                     f"{row['pages_per_s']:>8.1f} {row['steady_pages_per_s'] or 0:>7.1f} "
                     f"{ratio or 0:>5.2f}x {row['cpu_busy']:>5.0%}")
    return "\n".join(lines)


def render_cpu(rows: list[dict]) -> str:
    """CPU ms per fetched page: a row per role, a column per run."""
    lines = ["CPU ms/page".ljust(18) + "".join(f"{row['run']:>14}" for row in rows)]
    for role in ROLE_ORDER:
        cells = [row["cpu_ms_per_page"].get(role) for row in rows]
        if any(cell is not None for cell in cells):
            lines.append(role.ljust(18) + "".join(
                f"{'-' if cell is None else f'{cell:.1f}':>14}" for cell in cells))
    roles = [sum(v for k, v in row["cpu_ms_per_page"].items() if k not in ("other", "machine"))
             for row in rows]
    lines.append("all roles".ljust(18) + "".join(f"{v:>14.1f}" for v in roles))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 pages, 1 and 2 workers")
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--worker-concurrency", type=int, default=4,
                        help="Celery prefork processes per worker")
    parser.add_argument("--embedded-concurrency", default="4,16",
                        help="fetch threads of the embedded reference crawls")
    parser.add_argument("--latency", type=float, default=0.02, help="sandbox seconds per page")
    parser.add_argument("--pool", choices=("prefork", "threads", "solo"),
                        help="Celery pool of the workers (default: jlse worker's)")
    args = parser.parse_args(argv)
    if args.quick:
        args.pages, args.workers = 300, "1,2"
    args.worker_counts = [int(n) for n in args.workers.split(",")]
    args.embedded = [int(n) for n in args.embedded_concurrency.split(",") if n]
    return args


def _progress(row: dict) -> None:
    cpu = row["cpu_ms_per_page"]
    print(f"  {row['run']}: {row['pages_per_s']} pages/s, steady {row['steady_pages_per_s']}, "
          f"CPU ms/page {cpu}", flush=True)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_cluster_") as tmp_name:
        tmp = Path(tmp_name)
        topic = tmp / "phones"
        subprocess.run(JLSE + ["sandbox", "topic", "phones", "--out", str(topic)], cwd=ROOT,
                       check=True, capture_output=True)
        try:
            with sandbox_server(cfg.latency, tmp) as sandbox, private_database() as database:
                WORKER_ENV.update(JLSE_PROXY=sandbox[0], DATABASE_URL=database)
                for n_workers in cfg.worker_counts:
                    rows.append(run_distributed(n_workers, cfg, topic, sandbox, database, tmp))
                    _progress(rows[-1])
                for concurrency in cfg.embedded:
                    rows.append(run_embedded(concurrency, cfg, topic, sandbox, tmp))
                    _progress(rows[-1])
        finally:
            clear_redis_prefix()
    print(f"\nbfs, {cfg.pages} pages, sandbox latency {cfg.latency * 1000:.0f} ms, politeness "
          f"off; worker = `jlse worker --concurrency {cfg.worker_concurrency}` "
          f"({cfg.pool or 'default pool'}); {os.cpu_count()} CPUs")
    print(render(rows))
    print()
    print(render_cpu(rows))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"pages": cfg.pages, "latency": cfg.latency,
                                   "worker_concurrency": cfg.worker_concurrency,
                                   "pool": cfg.pool or "default",
                                   "cpus": os.cpu_count(), "runs": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
