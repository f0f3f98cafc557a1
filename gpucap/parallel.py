"""One parallel map for gpucap's independent work: the rows of ``validate``, the fits of
``errors``' leave-one-out variants, the runs of a simulated calibration, the planner's
simulation checks and a trace's replicas.

Where the work runs (``Runner``):

- **serially**, in this process: ``jobs=1``;
- **on this machine's cores** through joblib's process pool (loky): ``jobs=N``; the default is
  every core (``os.cpu_count()``), or ``GPUCAP_JOBS`` where it is set;
- **on a Dask cluster**: a ``distributed.Client`` (from a notebook), or a scheduler's address
  (``--dask tcp://host:8786`` or ``GPUCAP_DASK``). The same tasks, the same code path.

Results come back in the items' order wherever they ran, and every task carries its own inputs
(the simulations their fixed seeds), so a result never depends on where or in which order it
ran: callers reduce the list in order. Every task, serial ones included, runs with one BLAS
thread (threadpoolctl): a multithreaded matrix product sums in another order, and its last bits
would then depend on the threads a process had (Dask's workers have one). A map inside a task
runs serially (no pools of pools).

Failures: an error raised by a task is raised here with a note naming the item. A worker process
that dies (killed, out of memory) fails the tasks it held; each is run once more in a fresh pool,
one at a time, and one that kills its worker again is reported by name (``WorkerDied``). Dask
reschedules a dead worker's tasks itself and gives up with ``KilledWorker``, reported the same
way. A scheduler address that does not answer within ``CONNECT_TIMEOUT_S`` is one error line.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

JOBS_ENV = "GPUCAP_JOBS"
DASK_ENV = "GPUCAP_DASK"
CONNECT_TIMEOUT_S = 10.0  # a scheduler that does not answer in this long is reported, not waited on
_inside = threading.local()  # set while a task runs: a map inside it runs serially
# state a task needs from the process that maps it: name -> (capture, restore) (``carry``)
_CARRIED: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {}


class WorkerDied(RuntimeError):
    """A worker process died twice running the same task (``item``: its label)."""

    def __init__(self, item: str, cause: str) -> None:
        super().__init__(f"a worker process died twice running {item} ({cause}); run it with --jobs 1 to see why")
        self.item = item


def carry(name: str, capture: Callable[[], Any], restore: Callable[[Any], None]) -> None:
    """Process state that tasks need (e.g. the GPU files a command added to the catalog):
    ``capture()`` is taken where ``map`` is called and ``restore(value)`` is run in the worker
    before each task. A module registers its own state once, at import."""
    _CARRIED[name] = (capture, restore)


def check_jobs(jobs: object, where: str = "jobs") -> int:
    """``jobs`` as a whole number of processes >= 1, or a ValueError naming ``where``."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"{where} must be a whole number of processes >= 1 (1 runs serially), got {jobs!r}")
    return jobs


def default_jobs() -> int:
    """Every core of this machine, or ``GPUCAP_JOBS`` where it is set."""
    text = os.environ.get(JOBS_ENV)
    if text is None or not text.strip():
        return os.cpu_count() or 1
    try:
        return check_jobs(int(text), JOBS_ENV)
    except ValueError:
        raise ValueError(f"{JOBS_ENV}={text!r} must be a whole number of processes >= 1 (1 runs serially)") from None


def connect(address: str, timeout_s: float | None = None) -> Any:
    """A ``distributed.Client`` on the scheduler at ``address``; one error line naming it when the
    package is missing or the scheduler does not answer within ``timeout_s`` (None:
    ``CONNECT_TIMEOUT_S``)."""
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        from distributed import Client
    except ImportError:
        raise ValueError(
            f"--dask {address}: the Dask cluster needs the 'distributed' package (pip install distributed)"
        ) from None
    try:
        return Client(address, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(
            f"no Dask scheduler answered at {address} within {timeout_s:g} s ({reason}); "
            "start one (`dask scheduler`) or leave --dask out to use this machine's cores"
        ) from None


@dataclass(frozen=True)
class Runner:
    """Where ``map`` runs its tasks: ``jobs`` processes here (1: serially), or the Dask cluster of
    ``client``; ``progress``: a progress bar (tqdm; its notebook form in Jupyter) on stderr."""

    jobs: int = 1
    client: Any = None
    progress: bool = False

    @property
    def width(self) -> int:
        """How many tasks run at once: ``jobs``, or the Dask cluster's worker threads."""
        if self.client is None:
            return self.jobs
        workers = self.client.scheduler_info().get("workers", {})
        return max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))

    def map(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        *,
        desc: str = "",
        label: Callable[[int, T], str] | None = None,
    ) -> list[R]:
        """``[fn(x) for x in items]``, run where this runner says; ``desc`` heads the progress bar
        and ``label(k, item)`` names an item in errors (default "item k")."""
        items = list(items)
        name = label or (lambda k, _x: f"item {k}")
        with progress_bar(len(items), desc, self.progress) as bar:
            if not items:
                return []
            serial = getattr(_inside, "task", False) or (self.client is None and (self.jobs == 1 or len(items) == 1))
            if not serial and self.client is not None:
                return _dask_map(self.client, fn, items, name, bar)
            if not serial:
                done = _loky_map(self.jobs, fn, items, name, bar)
                if done is not None:
                    return done
            out = []
            for k, x in enumerate(items):
                out.append(_call(fn, x, name(k, x)))
                bar.update(1)
            return out


def runner(jobs: int | None = None, dask: Any = None, *, progress: bool = False) -> Runner:
    """A ``Runner`` from what a user gives: ``jobs`` (None: ``default_jobs()``), ``dask`` (a
    ``distributed.Client``, a scheduler address, or None: ``GPUCAP_DASK`` where it is set)."""
    jobs = default_jobs() if jobs is None else check_jobs(jobs, "n_jobs")
    if dask is None and os.environ.get(DASK_ENV, "").strip():
        dask = os.environ[DASK_ENV].strip()
    client = connect(dask) if isinstance(dask, str) else dask
    return Runner(jobs=jobs, client=client, progress=progress)


def as_runner(n_jobs: int | Runner | None = None, dask: Any = None, progress: bool = False) -> Runner:
    """The ``Runner`` a public function's ``n_jobs`` / ``dask`` / ``progress`` keywords name;
    ``n_jobs`` may be a ``Runner`` already (a caller that maps several times connects once)."""
    if isinstance(n_jobs, Runner):
        return n_jobs
    return runner(n_jobs, dask, progress=progress)


def parallel_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    jobs: int | None = None,
    dask: Any = None,
    desc: str = "",
    label: Callable[[int, T], str] | None = None,
    progress: bool = False,
) -> list[R]:
    """``[fn(x) for x in items]`` on ``jobs`` processes or a Dask cluster (``runner``)."""
    return runner(jobs, dask, progress=progress).map(fn, items, desc=desc, label=label)


def _call(fn: Callable[[T], R], item: T, name: str = "", state: dict[str, Any] | None = None) -> R:
    """``fn(item)`` marked as a task (a map inside runs serially), after restoring the ``state``
    carried from the mapping process (``carry``); an error gets a note naming the item."""
    from threadpoolctl import threadpool_limits

    for key, value in (state or {}).items():
        _CARRIED[key][1](value)
    outer = getattr(_inside, "task", False)
    _inside.task = True
    try:
        if outer:
            return fn(item)
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(item)
    except Exception as exc:
        if name:
            exc.add_note(f"(while running {name})")
        raise
    finally:
        _inside.task = outer


class _NoBar:
    def update(self, n: int) -> None:
        pass


class progress_bar:
    """A progress bar (tqdm on stderr; its notebook form in Jupyter) over ``total`` steps (None:
    a count), or, when not ``on``, an object whose ``update`` does nothing."""

    def __init__(self, total: int | None, desc: str, on: bool, unit: str = "task") -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.on = on and (total is None or total > 1)
        self.bar: Any = _NoBar()

    def __enter__(self) -> Any:
        if self.on:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc=self.desc or None, unit=self.unit, leave=False)
        return self.bar

    def __exit__(self, *exc: object) -> None:
        if self.on:
            self.bar.close()


_started: list[Any] = []  # the process pools this process started, shut down at exit


@atexit.register
def _shut_down() -> None:
    """Stop the pools' workers before the interpreter goes (their semaphores with them)."""
    for pool in _started:
        pool.shutdown(wait=True)
    _started.clear()


def _captured() -> dict[str, Any]:
    return {key: capture() for key, (capture, _) in _CARRIED.items()}


def _dead_worker_errors() -> tuple[type[BaseException], ...]:
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    return (TerminatedWorkerError, BrokenProcessPool)


def _loky_map(
    jobs: int, fn: Callable[[T], R], items: list[T], name: Callable[[int, T], str], bar: Any
) -> list[R] | None:
    """The tasks on joblib's reusable process pool, in order; dead workers' tasks run once more.
    None where this machine cannot start a pool (no semaphores, no processes): run serially."""
    from joblib.externals.loky import get_reusable_executor

    died = _dead_worker_errors()
    state = _captured()
    try:
        pool = get_reusable_executor(max_workers=min(jobs, len(items)))
        if all(p is not pool for p in _started):
            _started.append(pool)
        futures = [pool.submit(_call, fn, x, name(k, x), state) for k, x in enumerate(items)]
    except (OSError, NotImplementedError, PermissionError):
        return None
    out: list[Any] = [None] * len(items)
    again: list[int] = []
    for k, f in enumerate(futures):
        try:
            out[k] = f.result()
        except died:
            again.append(k)
        bar.update(1)
    for k in again:  # one at a time in a fresh pool, so a task that kills its worker is named
        try:
            retry = get_reusable_executor(max_workers=1)
            out[k] = retry.submit(_call, fn, items[k], name(k, items[k]), state).result()
        except died as exc:
            raise WorkerDied(name(k, items[k]), type(exc).__name__) from None
    return out


def _dask_map(client: Any, fn: Callable[[T], R], items: list[T], name: Callable[[int, T], str], bar: Any) -> list[R]:
    """The tasks on a Dask cluster, in order; a task Dask gives up on (``KilledWorker``) is named.
    The items go to the workers first (``scatter``), not inside the task graph: a month's trace
    pieces are hundreds of MiB, more than a graph should carry."""
    n, state = len(items), _captured()
    data = client.scatter(items)
    futures = client.map(_call, [fn] * n, data, [name(k, x) for k, x in enumerate(items)], [state] * n, pure=False)
    out: list[Any] = []
    try:
        for k, f in enumerate(futures):
            try:
                out.append(f.result())
            except Exception as exc:
                if type(exc).__name__ == "KilledWorker":
                    raise WorkerDied(name(k, items[k]), "Dask KilledWorker") from None
                raise
            bar.update(1)
    finally:
        client.cancel(futures[len(out) :])
    return out
