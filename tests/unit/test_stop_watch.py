"""StopWatch (fanfit.jobs.stop): a stop marker that appears during a long piece of work in the main
thread interrupts it within about one read interval; otherwise the work is untouched."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from fanfit.jobs.documents.train import TrainStop
from fanfit.jobs.stop import StopWatch

MARKER = TrainStop.parse(
    {"reason": "cancelled", "execution_arn": "", "written_at": 0.0}, source="test"
)


class Stopped(Exception):
    pass


class FakeReader:
    """A StopReader whose marker appears at its ``appear_after``-th read."""

    key = "jobs/x/stop.json"

    def __init__(self, appear_after: int | None) -> None:
        self.appear_after = appear_after
        self.reads = 0

    def read(self):
        self.reads += 1
        if self.appear_after is not None and self.reads >= self.appear_after:
            return MARKER
        return None


def _python_work(seconds: float) -> int:
    """Pure-Python work (like a forest's loop over trees) for ``seconds``."""
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += sum(range(100))
    return n


def test_a_marker_during_long_work_interrupts_it_with_on_stops_error() -> None:
    # GIVEN a marker that appears at the watch's third read (0.05 s apart)
    reader = FakeReader(appear_after=3)
    before = signal.getsignal(StopWatch.SIGNAL)
    t0 = time.perf_counter()
    # WHEN 20 s of Python work runs under the watch
    with pytest.raises(Stopped) as stopped, StopWatch(reader, 0.05, lambda m: Stopped(m.reason)):
        _python_work(20.0)
    # THEN it ends with on_stop's error about 0.15 s in, not after 20 s, with nothing chained
    assert time.perf_counter() - t0 < 5.0
    assert str(stopped.value) == "cancelled" and stopped.value.__cause__ is None
    # AND the signal's handler is the one before the watch
    assert signal.getsignal(StopWatch.SIGNAL) == before


def test_without_a_marker_the_work_ends_as_it_would_have() -> None:
    # GIVEN no marker
    reader = FakeReader(appear_after=None)
    # WHEN work runs under the watch THEN it returns its result and the watch read the marker
    with StopWatch(reader, 0.02, lambda m: Stopped()) as watch:
        assert _python_work(0.3) > 0
    assert watch.marker is None and reader.reads >= 5


def test_work_that_turns_the_interrupt_into_its_own_error_still_ends_with_on_stops() -> None:
    # GIVEN work that wraps whatever interrupts it into an error of its own (as some libraries do)
    reader = FakeReader(appear_after=2)

    def wrapping_work() -> None:
        try:
            _python_work(20.0)
        except BaseException as exc:
            raise RuntimeError("the fit failed") from exc

    # WHEN the marker appears during it
    with pytest.raises(Stopped) as stopped, StopWatch(reader, 0.05, lambda m: Stopped()):
        wrapping_work()
    # THEN the block ends with on_stop's error, chained to the work's
    assert isinstance(stopped.value.__cause__, RuntimeError)


def test_outside_the_main_thread_the_watch_does_nothing() -> None:
    # GIVEN a marker that is there from the first read, and work in another thread
    reader = FakeReader(appear_after=1)
    out: list[int] = []

    def run() -> None:
        with StopWatch(reader, 0.01, lambda m: Stopped()):
            out.append(_python_work(0.2))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    # THEN the work ran to its end and the marker was never read (the caller's checks remain)
    assert out and out[0] > 0 and reader.reads == 0


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        StopWatch(FakeReader(None), 0.0, lambda m: Stopped())
