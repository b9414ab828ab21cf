"""Peak memory of one trial: the one place that knows how each device reports it.

CPU: the process's peak resident set (VmHWM), reset per trial through ``/proc/self/clear_refs``.
CUDA: the caching allocator's peaks after a reset (allocated and reserved).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
from dataclasses import dataclass
from pathlib import Path

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(field_name: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024  # reported in kB
    except OSError:
        return None
    return None


def _trim_heap() -> None:
    # Freed heap of earlier trials stays resident until it is returned to the OS; without this,
    # the next trial's peak hides under the previous one's.
    gc.collect()
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(libc_name).malloc_trim(0)


def release_device_memory() -> None:
    """Give freed memory back: Python garbage, the CPU heap and the CUDA allocator cache."""
    _trim_heap()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass
class PeakMemoryMeter:
    """Measures the peak memory of the code between `reset` and `read`.

    Attributes:
        device: ``"cuda"`` or ``"cpu"``.
    """

    device: str

    def reset(self) -> None:
        release_device_memory()
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return
        try:
            _CLEAR_REFS.write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
            self._resettable = True
        except OSError:
            self._resettable = False
        self._start_rss = _status_bytes("VmRSS")

    def read(self) -> dict[str, int | str | None]:
        """The trial's peak and its parts, as user attrs (bytes)."""
        if self.device == "cuda":
            torch.cuda.synchronize()
            allocated = int(torch.cuda.max_memory_allocated())
            reserved = int(torch.cuda.max_memory_reserved())
            return {
                "peak_memory_bytes": reserved,
                "peak_allocated_bytes": allocated,
                "peak_reserved_bytes": reserved,
                "memory_source": "cuda_allocator",
            }
        peak = _status_bytes("VmHWM")
        return {
            "peak_memory_bytes": peak,
            "rss_start_bytes": getattr(self, "_start_rss", None),
            "memory_source": "rss_hwm" if getattr(self, "_resettable", False) else "rss_hwm_process",
        }
