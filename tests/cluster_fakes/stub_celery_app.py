"""A tiny real Celery app for the cluster-script test: JSON only, a private Redis key prefix."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("jlse_cluster_stub", broker=os.environ["CELERY_BROKER_URL"])
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    broker_transport_options={"global_keyprefix": os.environ["STUB_KEY_PREFIX"]},
)


@app.task(name="stub.fetch")
def fetch(url: str) -> str:
    return url
