"""The HTTP server in front of the engine, as the step-level simulation sees it.

Every request costs the server ``serial_s`` of CPU time (parsing, tokenizing, detokenizing and
streaming its output) on one core, and then ``latency_s`` of pure delay (HTTP round trip, first
streamed chunk) that holds nothing. The server's event loop interleaves the requests it holds,
so its core is shared among them: a processor-sharing queue, not first come first served. With
equal work per request the requests leave in the order they came, but a burst of N requests
sent at once leaves together after about ``N x serial_s``: measured on vLLM's server
(benchmarks/README.md, "The host beside the engine"), 512 one-token requests sent at once got
no first token for 0.5 s and most of them after 1.4-2.2 s, where a first-come-first-served
server would have handed them out evenly from the start.
"""

from __future__ import annotations

from collections import deque


class SharedServer:
    """A processor-sharing queue with the same work per job, advanced in time.

    Virtual time ``V`` grows at ``1 / n`` per second while n jobs are inside (each gets 1 / n of
    the core); a job that arrives at ``V_a`` leaves when ``V`` reaches ``V_a + work``. Jobs leave
    in arrival order, so the next departure is the head's.
    """

    def __init__(self, work_s: float, latency_s: float = 0.0) -> None:
        if not (work_s >= 0 and latency_s >= 0):
            raise ValueError(f"front-end work and latency must be >= 0 s, got {work_s!r} and {latency_s!r}")
        self.work_s, self.latency_s = float(work_s), float(latency_s)
        self.now = 0.0
        self.virtual = 0.0
        self.inside: deque[tuple[int, float]] = deque()  # (job, virtual time at which it leaves)
        self.left: list[tuple[int, float]] = []  # (job, time it is ready for the engine)

    def _leave_head(self) -> None:
        job, _ = self.inside.popleft()
        self.left.append((job, self.now + self.latency_s))

    def advance(self, t: float) -> None:
        """Run the core up to time ``t`` (no earlier than now)."""
        while self.inside and t > self.now:
            n = len(self.inside)
            head_v = self.inside[0][1]
            at = self.now + (head_v - self.virtual) * n
            if at > t:
                self.virtual += (t - self.now) / n
                self.now = t
                return
            self.now, self.virtual = at, head_v
            while self.inside and self.inside[0][1] <= self.virtual:
                self._leave_head()
        self.now = max(self.now, t)

    def add(self, job: int, t: float) -> None:
        """Job ``job`` arrives at time ``t`` (not before the last arrival or advance)."""
        self.advance(t)
        if self.work_s == 0.0:
            self.left.append((job, t + self.latency_s))
            return
        self.inside.append((job, self.virtual + self.work_s))

    def next_ready(self) -> float:
        """When the next job is ready for the engine, if nobody else arrives first."""
        if not self.inside:
            return float("inf")
        return self.now + (self.inside[0][1] - self.virtual) * len(self.inside) + self.latency_s

    def take(self) -> list[tuple[int, float]]:
        """Jobs that have left since the last call, with the time each is ready for the engine."""
        out, self.left = self.left, []
        return out
