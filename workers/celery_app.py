"""The Celery app of distributed mode: queues ``fetch`` and ``learn``, JSON only.

Configuration comes from the environment: ``CELERY_BROKER_URL`` (default: db 1 of
``REDIS_URL``'s server, so the broker and the frontier keep separate databases; a cluster of
several frontier shards takes RabbitMQ, ``amqp://...``, so the frontier's Redis carries no
broker traffic) and ``JLSE_KEY_PREFIX`` (a non-default one also prefixes every broker key and
queue name, so several clusters or test sessions can share one Redis or RabbitMQ). No result backend: nothing waits for task results.

Reliability: ``task_acks_late`` + ``task_reject_on_worker_lost`` + prefetch 1 mean a task is
acknowledged only after it ran, and a worker killed mid-task gives its task back. The broker's
visibility timeout (600 s) is above the task time limit (120 s), so a slow task is never
delivered twice while it still runs. The frontier's own lease is the second line of defence:
a task whose lease has ended (reaped and handed out again) is dropped by the worker.
"""

from __future__ import annotations

from celery import Celery
from kombu.transport import redis as kombu_redis

from jlse.scheduler.crawl_registry import broker_url, key_prefix

TASK_TIME_LIMIT = 120  # seconds; a fetch has its own deadline well below this
LEARN_TIME_LIMIT = 540  # seconds for a learning round (jlse.learn)
VISIBILITY_TIMEOUT = 600  # above the time limits: a running task is never redelivered

def _queue(name: str) -> str:
    """A queue's name: with a non-default ``JLSE_KEY_PREFIX`` it is prefixed too, so clusters
    (or test sessions) sharing one RabbitMQ keep their tasks apart, as their Redis keys."""
    return name if key_prefix() == "jlse:" else f"{key_prefix()}{name}"


FETCH_QUEUE, LEARN_QUEUE = _queue("fetch"), _queue("learn")


def _transport_options() -> dict:
    options: dict = {"visibility_timeout": VISIBILITY_TIMEOUT}
    if key_prefix() != "jlse:":
        options["global_keyprefix"] = key_prefix()
    return options


class _Channel(kombu_redis.Channel):
    """kombu's Redis channel, reusing its short-lived redis-py client objects.

    kombu makes a new client for every publish and ack (``conn_or_acquire``), and redis-py
    fills ~200 response callbacks into each (0.1 ms of CPU; several times per task across the
    dispatcher, the worker and its pool). Such a client holds no connection of its own (it takes
    one from the pool per command), so one per pool does the same work; a new pool (after a
    reconnect) gets a new client. The asynchronous clients (BRPOP, pub/sub) are made once per
    channel and pin a connection: they stay kombu's."""

    def _create_client(self, asynchronous: bool = False):  # noqa: ANN202 - kombu's API
        if asynchronous:
            return super()._create_client(asynchronous)
        cached = self.__dict__.get("_jlse_client")
        if cached is None or cached[0] is not self.pool:
            cached = self.__dict__["_jlse_client"] = (self.pool, super()._create_client())
        return cached[1]


def make_app() -> Celery:
    # The channel class is swapped on kombu's own Redis transport (not a transport of ours),
    # so broker URLs keep their redis:// scheme for Celery's banner and Flower.
    if kombu_redis.Transport.Channel is kombu_redis.Channel:
        kombu_redis.Transport.Channel = _Channel
    app = Celery("jlse", broker=broker_url(), include=["jlse.workers.tasks"])
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=TASK_TIME_LIMIT,
        task_soft_time_limit=TASK_TIME_LIMIT - 10,
        broker_transport_options=_transport_options(),
        broker_connection_retry_on_startup=True,
        task_routes={"jlse.fetch": {"queue": FETCH_QUEUE}, "jlse.fetch_batch": {"queue": FETCH_QUEUE},
                     "jlse.learn": {"queue": LEARN_QUEUE}},
        task_default_queue=FETCH_QUEUE,
        worker_send_task_events=True,
        # no "task-sent" event: it doubled the dispatcher's publishes (bench_broker.py);
        # Flower lists a task from its worker's task-received event on
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
    )
    return app


app = make_app()
