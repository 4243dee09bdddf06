"""The Dask engine: a client on a LocalCluster sized to the machine or on an existing scheduler,
and a map that yields task results as they finish, retrying tasks whose worker died."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from mbctl.errors import InputError

__all__ = ["RETRIES", "dask_client", "default_workers", "map_tasks"]

RETRIES = 2  # a task whose worker dies (or that raises) runs again this many times before it counts as failed


def default_workers() -> int:
    """One worker process per core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def dask_client(workers: int | None = None, scheduler: str | None = None, timeout_s: float = 60.0) -> Iterator[Any]:
    """A ``distributed.Client``: on ``scheduler`` (an address such as ``tcp://host:8786``), or on a
    new LocalCluster of ``workers`` single-threaded processes (default :func:`default_workers`).

    Raises:
        InputError: If the scheduler cannot be reached (naming ``--scheduler``).
    """
    from distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=timeout_s)
        except (OSError, TimeoutError) as exc:
            raise InputError(f"cannot reach the Dask scheduler {scheduler!r} ({exc.__class__.__name__})", field="--scheduler") from None
        with client:
            yield client
        return
    n = default_workers() if workers is None else workers
    with contextlib.ExitStack() as stack:
        # a Ctrl-C inside LocalCluster() would leave a half-started cluster that nothing closes (its
        # exit handler then fails with a traceback): the signal waits until the cluster is ours to close
        with _signals_deferred():
            # processes, one thread each: the numerics hold the GIL; no dashboard, and the scheduler's
            # HTTP routes on a free local port (not 8787, which another cluster may hold)
            cluster = stack.enter_context(LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR,
                scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            ))  # fmt: skip
            client = stack.enter_context(Client(cluster, timeout=timeout_s))
        yield client


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM received inside the block are delivered, to the handlers there were, when it ends.

    The handlers only note the signal, so the worker processes started inside inherit nothing
    (a blocked signal mask would be inherited, and their nanny could not stop them). A second
    signal is not deferred: whoever sends it insists (a start-up that hangs)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def note(signum: int, frame: object) -> None:
        received.append(signum)
        if len(received) > 1 and callable(previous[signum]):
            previous[signum](signum, frame)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received:
            signal.raise_signal(received[0])


def map_tasks(
    client: Any, function: Callable[..., Any], items: Iterable[tuple], *, retries: int = RETRIES, in_flight: int | None = None
) -> Iterator[tuple[int, Any, BaseException | None]]:
    """Run ``function(*item)`` for every item; yield ``(index, result, error)`` as tasks finish.

    ``items`` is consumed lazily: at most ``in_flight`` tasks are submitted and not yet
    finished (default: all at once), and the next item is drawn after the caller has
    handled a result, so an item generator can use what earlier results showed (batch
    sizes from measured run times). Without a client (None) the items run here, one
    after another (no retries). ``error`` is the exception of a task that failed after its retries
    (a worker that kept dying, ``distributed.KilledWorker``), its result then None.
    Unfinished tasks are cancelled when the caller stops iterating (Ctrl-C included).
    """
    source = iter(items)
    if client is None:
        for i, item in enumerate(source):
            try:
                result = function(*item)
            except Exception as exc:  # as a task's error after its retries
                yield i, None, exc
            else:
                yield i, result, None
        return
    from distributed import as_completed

    index: dict[str, int] = {}
    submitted = 0
    pending: set = set()
    queue = as_completed()

    def submit() -> bool:
        nonlocal submitted
        item = next(source, None)
        if item is None:
            return False
        future = client.submit(function, *item, retries=retries, pure=False)
        index[future.key] = submitted
        submitted += 1
        pending.add(future)
        queue.add(future)
        return True

    try:
        while (in_flight is None or len(pending) < in_flight) and submit():
            pass
        for future in queue:
            pending.discard(future)
            i = index.pop(future.key)
            try:
                result = future.result()
            except Exception as exc:  # KilledWorker, or the function's own error after its retries
                yield i, None, exc
            else:
                yield i, result, None
            finally:
                future.release()  # the result leaves the cluster as soon as it is handled
            while (in_flight is None or len(pending) < in_flight) and submit():
                pass
    finally:
        if pending:
            client.cancel(list(pending))
