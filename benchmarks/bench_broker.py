"""The broker's share of a page: Celery's Redis transport against RabbitMQ, side by side.

Publishes ``--tasks`` ``jlse.fetch``-shaped tasks with the dispatcher's own Celery app, as it
publishes them now and as it did before frontier shards (a "task-sent" event per task)
(``workers.celery_app``: JSON, acks late, prefetch 1) and consumes them as a worker does (one
unacknowledged at a time, acknowledged after it "ran"), once through a private Redis server
(the transport that shared the frontier's Redis before shards) and once through RabbitMQ
(127.0.0.1:5672, ``--amqp``). Printed per task: the broker server's CPU µs (Redis: INFO cpu;
RabbitMQ: the beam.smp process's /proc stat, the whole server), the publisher's and the
consumer's CPU µs (this process's thread time for each phase).

    .venv/bin/python benchmarks/bench_broker.py [--tasks 5000] [--amqp amqp://guest:guest@127.0.0.1:5672//]
        [--batch N ...]

``--batch N ...`` publishes instead, through RabbitMQ only, the tasks N to a message as the
dispatcher does with ``fetch_batch`` N (``jlse.fetch_batch``, N URLs a message; 1: a
``jlse.fetch`` each), the values by turns, 3 rounds; CPU µs per URL.

Results: benchmarks/results/broker.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "broker.json"
TASK = {"url": "http://www.site1234.com/c/12/item-98765.html", "url_id": 98765,
        "priority": 0.734, "depth": 3, "parent_id": 4321, "lease": "123456789"}


def beam_cpu() -> float:
    """CPU seconds of the RabbitMQ server (every beam.smp process)."""
    total = 0.0
    for pid in subprocess.run(["pgrep", "beam.smp"], capture_output=True,
                              text=True).stdout.split():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run(broker: str, tasks: int, server_cpu, before_shards: bool = False,
        batch: int = 1) -> dict:
    """``before_shards``: publish as the dispatcher did before (a "task-sent" event per task,
    Celery's saferepr of the arguments); ``batch`` > 1: ``batch`` tasks a ``jlse.fetch_batch``
    message, as the dispatcher sends them with ``fetch_batch``."""
    os.environ["CELERY_BROKER_URL"] = broker
    os.environ["JLSE_KEY_PREFIX"] = f"jlsebroker{uuid.uuid4().hex[:6]}:"
    import importlib

    from jlse.workers import celery_app

    importlib.reload(celery_app)
    app, queue = celery_app.app, celery_app.FETCH_QUEUE
    app.conf.task_send_sent_event = before_shards
    options = {} if before_shards else {"argsrepr": f"('crawl', {TASK['url']!r})",
                                        "kwargsrepr": "{}"}
    from kombu import Queue

    with app.connection_for_write() as conn:  # declare the queue before publishing
        Queue(queue, channel=conn.default_channel).declare()
    messages = tasks // batch
    chunk = [dict(TASK, url_id=TASK["url_id"] + i, lease=str(123456789 + i))
             for i in range(batch)]
    before, started = server_cpu(), time.thread_time()
    for _ in range(messages):
        if batch == 1:
            app.send_task("jlse.fetch", args=["crawl", TASK], queue=queue, **options)
        else:  # as jlse.cluster.run_dispatcher's send_batch
            app.send_task("jlse.fetch_batch", args=["crawl", chunk], queue=queue,
                          argsrepr=f"('crawl', {batch} URLs from {TASK['url']!r})",
                          kwargsrepr="{}")
    published = time.thread_time() - started
    tasks = messages * batch
    received = 0

    def on_message(body, message) -> None:
        nonlocal received
        received += 1
        message.ack()

    started = time.thread_time()
    with app.connection_for_read() as conn:
        with conn.Consumer(Queue(queue), callbacks=[on_message], prefetch_count=1,
                           accept=["json"]):
            while received < messages:
                conn.drain_events(timeout=10)
    consumed = time.thread_time() - started
    server = server_cpu() - before
    return {"broker": broker.split("://")[0], "tasks": tasks,
            "publish": "before shards" if before_shards else "current", "batch": batch,
            "server_cpu_us_per_task": round(1e6 * server / tasks, 1),
            "publisher_cpu_us_per_task": round(1e6 * published / tasks, 1),
            "consumer_cpu_us_per_task": round(1e6 * consumed / tasks, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--amqp", default="amqp://guest:guest@127.0.0.1:5672//")
    parser.add_argument("--redis-port", type=int, default=17390)
    parser.add_argument("--batch", type=int, nargs="+", metavar="N",
                        help="RabbitMQ only: N tasks a message (fetch_batch), by turns")
    args = parser.parse_args()
    if args.batch:
        results = [run(args.amqp, args.tasks, beam_cpu, batch=batch)
                   for _ in range(3) for batch in args.batch]
        for result in results:
            print(json.dumps(result))
        return
    import redis

    subprocess.run(["redis-server", "--port", str(args.redis_port), "--daemonize", "yes",
                    "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"], check=True)
    client = redis.Redis(port=args.redis_port)
    for _ in range(50):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.1)

    def redis_cpu() -> float:
        info = client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    try:
        redis_url = f"redis://127.0.0.1:{args.redis_port}/1"
        results = [run(redis_url, args.tasks, redis_cpu, before_shards=True),
                   run(args.amqp, args.tasks, beam_cpu),
                   run(redis_url, args.tasks, redis_cpu),
                   run(args.amqp, args.tasks, beam_cpu, before_shards=True)]
    finally:
        client.shutdown(nosave=True)
    for result in results:
        print(json.dumps(result))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
