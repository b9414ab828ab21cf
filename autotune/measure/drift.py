"""The machine's drift: whether the machine as a whole runs slower now than when a reference was
measured (another job started on it, a GPU neighbour, thermal throttling).

Screening compares a trial's steps with the study's best, measured earlier (see
`autotune.measure.callback`). Each measured trial and the baseline record `probe_s`, a fixed small
amount of torch work timed on their device right after their window; before a trial is screened out
the probe runs again, and the trial's speed is judged as it would be at the reference's
(`slowdown`): a machine that slowed down as a whole screens nothing out.

The probe runs in the training process, so with the thread count training uses: on a CPU shared
with other jobs its matmuls wait for descheduled threads as the training's ops do. It is the time
of a fixed amount of work, matmuls timed as a whole with the device synchronized at its edges.
Not the least of short repetitions: with its threads competing for the cores, a matmul either
runs while they all hold a core or waits a time slice for one, and the least of a few short
repetitions catches a moment when nothing waited, and reads no slowdown while the steps run
several times slower. The whole errs the other way, toward reading a slowdown, which only
screens less. It reads no random numbers (the trial's seeded streams stay as they were) and allocates
three small matrices.
"""

from __future__ import annotations

import time

import torch

# Per device: the matrices' size and how many matmuls, some milliseconds on an idle machine: long
# enough to span several of a shared CPU's time slices.
CPU_WORK = (256, 84)
CUDA_WORK = (2048, 64)
# The most slowdown the probe can excuse. Its own work suffers more from a loaded CPU than many
# training steps do (its matmuls wait for their threads a time slice each, so it reads more
# slowdown than the steps suffer, and far more in bursts of other jobs); uncapped, a burst would
# let a configuration many times slower than the best go on. Capped, one more than 8x slower (at
# 0.5) is stopped whatever the probe reads.
MAX_SLOWDOWN = 4.0
# On a CPU, the probe stops once it has run this long and reads its pace so far: a loaded machine
# (its threads waiting a time slice for each matmul) is told as surely sooner.
BUDGET_S = 0.25


def probe_s(device: str = "cpu") -> float:
    """The seconds the probe's fixed work takes on `device` now (``"cpu"``, or ``"cuda"``: the
    current CUDA device), after one matmul to warm up; on a CPU extrapolated from the part done
    within `BUDGET_S`."""
    size, matmuls = CUDA_WORK if device == "cuda" else CPU_WORK
    on = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    with torch.no_grad():
        left = torch.full((size, size), 1.0 / size, device=on)
        right = torch.eye(size, device=on)
        out = torch.empty((size, size), device=on)
        torch.mm(left, right, out=out)
        _sync(device)  # the trial's queued work is not the probe's
        start = time.perf_counter()
        done = 0
        while done < matmuls:
            torch.mm(left, right, out=out)
            done += 1
            if device != "cuda" and time.perf_counter() - start > BUDGET_S:
                break
        _sync(device)
        return (time.perf_counter() - start) * matmuls / done


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def slowdown(reference_probe_s: float | None, probe_now_s: float | None) -> float:
    """How much slower the machine runs now than when the reference was measured: the probe's
    ratio (now / then), between 1 and `MAX_SLOWDOWN`; 1 without both probes. Never under 1: a
    machine that seems faster now screens out no more than the plain comparison does (a lucky
    probe must not stop a trial)."""
    if not reference_probe_s or not probe_now_s or reference_probe_s <= 0:
        return 1.0
    return min(MAX_SLOWDOWN, max(1.0, probe_now_s / reference_probe_s))
