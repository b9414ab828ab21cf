"""Stopping a training step that runs past its deadline, in the middle of the step.

Screening judges a trial on its steps (`autotune.measure.callback`): one whose fastest step is
under the screening line stops there. A step ten times slower than the best takes ten times as
long to finish before it can be judged; when every step the trial ran so far was already slower
than a step at the line, the step it runs next is judged at its deadline instead: the moment its
duration alone proves it under the line. A timer thread sends the training thread a signal there,
and the signal's handler asks the owner for the exception that ends the trial (None: the step is
not overdue after all, it ended or another began) and raises it in the training thread, between two
Python operations (in the forward pass, a hook or the data loader: wherever the step is).

Only where that is safe: in the main thread (Python runs signal handlers there), with the
real-time signal `SIGNAL` unclaimed (POSIX with real-time signals: Linux), one trial at a time.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

# A real-time signal nothing in the stack claims (the Trainer, torchrun, Ray and SLURM use SIGUSR1/2).
SIGNAL: int | None = signal.SIGRTMIN + 5 if hasattr(signal, "SIGRTMIN") else None


class StepDeadline:
    """Raises an exception in the training (main) thread once an armed deadline passes.

    Use `step_deadlines()`, which installs the signal handler for its block and gives None where
    deadlines cannot work."""

    def __init__(self, signum: int) -> None:
        self._signum = signum
        self._target = threading.main_thread().ident
        self._overdue: Callable[[], BaseException | None] | None = None
        self._timer: threading.Timer | None = None

    def arm(self, seconds: float, overdue: Callable[[], BaseException | None]) -> None:
        """In `seconds`, ask `overdue` for the exception to raise in the training thread (it
        returns None when the step is not overdue after all). Replaces any armed deadline."""
        self.disarm()
        self._overdue = overdue
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        """No exception from the armed deadline, even if its signal is on its way."""
        self._overdue = None
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join()  # a signal it sent is delivered before the join returns

    def _fire(self) -> None:
        if self._overdue is not None and self._target is not None:
            signal.pthread_kill(self._target, self._signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        overdue, self._overdue = self._overdue, None
        exc = overdue() if overdue is not None else None
        if exc is not None:
            raise exc
        self._overdue = overdue  # not overdue yet (a late signal): the deadline stays armed


@contextlib.contextmanager
def step_deadlines() -> Iterator[StepDeadline | None]:
    """A `StepDeadline` for the block (its handler installed, the previous one restored after), or
    None where a deadline cannot stop a step: not the main thread, no real-time signals, or the
    signal already claimed by someone else."""
    if (
        SIGNAL is None
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(SIGNAL) not in (signal.SIG_DFL, None)
    ):
        yield None
        return
    deadline = StepDeadline(SIGNAL)
    previous = signal.signal(SIGNAL, deadline._handle)
    try:
        yield deadline
    finally:
        deadline.disarm()
        signal.signal(SIGNAL, previous)
