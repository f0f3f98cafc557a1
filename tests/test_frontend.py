"""The HTTP server in front of the engine as a processor-sharing queue (gpucap.queueing.frontend), times
derived by hand."""

import pytest

from gpucap.queueing.frontend import SharedServer


def ready(server: SharedServer, until: float) -> dict[int, float]:
    server.advance(until)
    return dict(server.take())


def test_a_lone_request_takes_its_work_and_latency() -> None:
    s = SharedServer(work_s=0.004, latency_s=0.010)
    s.add(0, 1.0)
    assert s.next_ready() == pytest.approx(1.014)
    assert ready(s, 2.0) == {0: pytest.approx(1.014)}


def test_a_burst_leaves_together() -> None:
    """N requests at once share the core: each gets 1/N of it, so all leave at N x work."""
    s = SharedServer(work_s=0.004)
    for j in range(512):
        s.add(j, 0.0)
    out = ready(s, 10.0)
    assert len(out) == 512 and list(out.values()) == pytest.approx([512 * 0.004] * 512)


def test_shared_core_by_hand() -> None:
    """A (work 1) at t = 0, B (work 1) at t = 0.5: A runs alone until 0.5 (0.5 left), then both at
    half speed: A finishes its 0.5 at t = 1.5, when B has had 0.5; B alone then, done at 2.0."""
    s = SharedServer(work_s=1.0)
    s.add(0, 0.0)
    s.add(1, 0.5)
    assert s.next_ready() == pytest.approx(1.5)
    assert ready(s, 1.6) == {0: pytest.approx(1.5)}
    assert s.next_ready() == pytest.approx(2.0)
    assert ready(s, 3.0) == {1: pytest.approx(2.0)}


def test_no_work_passes_at_once_and_bad_values_are_refused() -> None:
    s = SharedServer(work_s=0.0, latency_s=0.02)
    s.add(7, 3.0)
    assert ready(s, 3.0) == {7: pytest.approx(3.02)}
    with pytest.raises(ValueError, match="must be >= 0"):
        SharedServer(work_s=-1.0)
