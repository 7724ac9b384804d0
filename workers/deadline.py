"""Deadlines that cover a whole request: connection, status line and headers included.

A socket's read timeout restarts with every byte, so a server that trickles its headers one byte
every few seconds holds a plain ``requests`` call forever. ``DeadlineWatch`` is one thread per
process that shuts down the socket of any request still reading its response when that
request's deadline passes; the blocked read then returns at once and the fetch ends.

A fetch declares its deadline with ``request_deadline(...)`` (thread-local); the connection
classes made by ``with_deadline`` register their socket while they wait for the response.
``abort_all`` ends every watched request now (Ctrl+C: the pages in flight stay queued).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

_current = threading.local()  # .deadline: monotonic time the thread's request must end by


@contextmanager
def request_deadline(deadline: float) -> Iterator[None]:
    """Requests made by this thread inside the block end by ``deadline`` (monotonic)."""
    previous = getattr(_current, "deadline", None)
    _current.deadline = deadline
    try:
        yield
    finally:
        _current.deadline = previous


class DeadlineWatch:
    """Shuts down registered sockets whose deadline has passed."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._sockets: dict[int, socket.socket] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self.expired = 0  # sockets shut down by a deadline (for tests and logs)

    def watch(self, sock: socket.socket, deadline: float) -> int:
        """Watch ``sock`` until ``unwatch``; a token for ``unwatch``."""
        with self._lock:
            token = next(self._ids)
            self._sockets[token] = sock
            heapq.heappush(self._heap, (deadline, token))
            self._start()
            self._lock.notify()
            return token

    def unwatch(self, token: int) -> None:
        with self._lock:
            self._sockets.pop(token, None)

    def abort_all(self) -> int:
        """Shut down every watched socket now; how many."""
        with self._lock:
            sockets = list(self._sockets.values())
            self._sockets.clear()
        for sock in sockets:
            _shutdown(sock)
        return len(sockets)

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="deadline-watch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                due = self._pop_due()
                if not due:
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._lock.wait(wait)
                    continue
            for sock in due:
                self.expired += 1
                _shutdown(sock)

    def _pop_due(self) -> list[socket.socket]:
        now = time.monotonic()
        due = []
        while self._heap and (self._heap[0][0] <= now or self._heap[0][1] not in self._sockets):
            _, token = heapq.heappop(self._heap)
            sock = self._sockets.pop(token, None)
            if sock is not None:
                due.append(sock)
        return due


WATCH = DeadlineWatch()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def with_deadline(base: type) -> type:
    """A subclass of the urllib3 connection class ``base`` whose wait for the response (status
    line and headers) ends at the thread's ``request_deadline``."""

    def getresponse(self: Any, *args: Any, **kwargs: Any) -> Any:
        deadline = getattr(_current, "deadline", None)
        sock = getattr(self, "sock", None)
        if deadline is None or sock is None:
            return base.getresponse(self, *args, **kwargs)
        token = WATCH.watch(sock, deadline)
        try:
            return base.getresponse(self, *args, **kwargs)
        finally:
            WATCH.unwatch(token)

    return type(f"Deadline{base.__name__}", (base,), {"getresponse": getresponse})
