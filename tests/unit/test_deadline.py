"""Step deadlines (`autotune.measure.deadline`): an armed deadline raises its exception in the
training thread, in the middle of whatever it runs (a sleep here); one disarmed, not overdue or
outlived by its block raises nothing; the previous signal handler comes back; where a deadline
cannot work (another thread, the signal taken) there is none."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from autotune.measure import deadline as deadline_module
from autotune.measure.deadline import step_deadlines

pytestmark = pytest.mark.skipif(deadline_module.SIGNAL is None, reason="no real-time signals here")


class Late(Exception):
    pass


def test_an_armed_deadline_raises_in_the_middle_of_a_step() -> None:
    finished = False
    with step_deadlines() as deadline:
        assert deadline is not None
        deadline.arm(0.05, Late)
        with pytest.raises(Late):
            time.sleep(5)
            finished = True
    assert not finished


def test_a_step_that_is_not_overdue_after_all_goes_on() -> None:
    asked: list[float] = []
    with step_deadlines() as deadline:
        assert deadline is not None
        deadline.arm(0.05, lambda: asked.append(time.monotonic()) or None)  # type: ignore[func-returns-value]
        began = time.monotonic()
        time.sleep(0.3)  # resumed after the handler (PEP 475): it sleeps its whole time
        assert time.monotonic() - began >= 0.3
    assert len(asked) == 1


def test_a_disarmed_deadline_raises_nothing() -> None:
    with step_deadlines() as deadline:
        assert deadline is not None
        deadline.arm(0.05, Late)
        deadline.disarm()
        time.sleep(0.2)


def test_the_block_ends_its_deadline_and_gives_the_signal_back() -> None:
    assert deadline_module.SIGNAL is not None
    before = signal.getsignal(deadline_module.SIGNAL)
    with step_deadlines() as deadline:
        assert deadline is not None
        assert signal.getsignal(deadline_module.SIGNAL) != before
        deadline.arm(0.05, Late)
    time.sleep(0.2)  # past the deadline: nothing raised, and the process (default action) lives
    assert signal.getsignal(deadline_module.SIGNAL) == before


def test_a_new_deadline_replaces_the_armed_one() -> None:
    with step_deadlines() as deadline:
        assert deadline is not None
        deadline.arm(0.05, Late)
        deadline.arm(10.0, Late)
        time.sleep(0.2)


def test_no_deadline_outside_the_main_thread() -> None:
    got: list[object] = []

    def run() -> None:
        with step_deadlines() as deadline:
            got.append(deadline)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    assert got == [None]


def test_no_deadline_when_the_signal_has_a_handler_already() -> None:
    assert deadline_module.SIGNAL is not None
    theirs = signal.signal(deadline_module.SIGNAL, lambda *_: None)
    try:
        with step_deadlines() as deadline:
            assert deadline is None
    finally:
        signal.signal(deadline_module.SIGNAL, theirs)
