"""The one failure a whole search ended with (`common_failure`): where no configuration was
measured and every trial that ran failed with the same error, that error is the search's result,
not an empty answer. Pure: reads records."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.records import TrialRecord
from autotune.store.outcomes import COMPILE_ERROR, CRASHED, ERROR, MISSING_KERNEL, MISSING_PACKAGE, NAN_LOSS

# Failures that say the code or the environment is broken for every configuration alike, not that
# one configuration does not fit or is slow: out of memory, over the cap and screening are results.
BROKEN = (ERROR, COMPILE_ERROR, MISSING_PACKAGE, MISSING_KERNEL, CRASHED, NAN_LOSS)


def common_failure(trials: Sequence[TrialRecord]) -> tuple[str, str, int] | None:
    """(reason, message, trials) of the one failure every trial that ran ended with, or None: a
    trial was measured, none ran, or they failed in more than one way. Trials a pre-check stopped
    before anything was built (a value that cannot run here, a duplicate) did not run."""
    ran = [t for t in trials if t.state in ("COMPLETE", "PRUNED", "FAIL") and t.trained is not False]
    if not ran or any(t.tokens_per_s is not None for t in ran):
        return None
    failures = {(t.reason, t.message) for t in ran}
    if len(failures) != 1:
        return None
    reason, message = failures.pop()
    if reason not in BROKEN or not message:
        return None
    return reason, message, len(ran)
