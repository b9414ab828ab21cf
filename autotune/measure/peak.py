"""Peak memory of one trial: the one place that knows how each device reports it.

CPU: the process's peak resident set (VmHWM), reset per trial through ``/proc/self/clear_refs``, plus
the largest private memory its child processes (data-loader workers) held, sampled during the trial.
CUDA: the caching allocator's peaks after a reset (allocated and reserved), and the process's
device memory as NVML reports it, sampled in a background thread during the trial: that counts
the CUDA context and buffers outside PyTorch's allocator. The trial's peak is the larger of the
reserved peak and the NVML peak.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def rss_bytes() -> int | None:
    """The process's resident set size now (Linux), or None."""
    return _status_bytes("VmRSS")


def _trim_heap() -> None:
    # Freed heap of earlier trials stays resident until it is returned to the OS; without this,
    # the next trial's peak hides under the previous one's.
    gc.collect()
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(libc_name).malloc_trim(0)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Move every object alive now (the libraries, the Trainer, the dataset) out of the cyclic
    garbage collector's reach until the block ends. Each trial frees memory with `gc.collect()`
    several times (accelerate, the Trainer and the memory meter each do); with torch and
    transformers loaded one collection walks hundreds of thousands of objects, and only the
    trial's own objects can be garbage. Reference counting still frees everything."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def release_device_memory() -> None:
    """Give freed memory back: Python garbage, the CPU heap and the CUDA allocator cache."""
    _trim_heap()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class NvmlSampler:
    """Samples this process's device memory through NVML until stopped; keeps the maximum.

    Every NVML failure (no library, no permission, a PID namespace hiding the process) leaves
    `peak_bytes` None: the allocator's figures still stand.

    Args:
        device_index: the torch CUDA device to watch.
        interval_s: time between samples.
        nvml: the `pynvml` module (a test passes a fake).
    """

    def __init__(self, device_index: int = 0, interval_s: float = 0.02, nvml: Any = None) -> None:
        self.interval_s = interval_s
        self.peak_bytes: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml = nvml
        self._handle: Any = None
        self._device_index = device_index

    def start(self) -> None:
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
            self._handle = self._nvml_handle()
        except Exception:
            self._handle = None
            return
        self.peak_bytes = None
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="autotune-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> int | None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.sample()  # one last look at the end of the trial
        return self.peak_bytes

    def sample(self) -> None:
        if self._handle is None:
            return
        with contextlib.suppress(Exception):
            for proc in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                used = getattr(proc, "usedGpuMemory", None)
                if proc.pid == os.getpid() and used:
                    self.peak_bytes = max(self.peak_bytes or 0, int(used))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def _nvml_handle(self) -> Any:
        # Torch and NVML may number devices differently (CUDA_VISIBLE_DEVICES): match by PCI bus.
        with contextlib.suppress(Exception):
            props = torch.cuda.get_device_properties(self._device_index)
            domain, bus, device = (getattr(props, f"pci_{part}_id") for part in ("domain", "bus", "device"))
            return self._nvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08x}:{bus:02x}:{device:02x}.0")
        return self._nvml.nvmlDeviceGetHandleByIndex(self._device_index)


def child_pids(pid: int | None = None) -> list[int]:
    """The direct children of a process (Linux), e.g. a trial's data-loader workers."""
    pid = os.getpid() if pid is None else pid
    found: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            found += [int(x) for x in children.read_text().split()]
    return found


def private_bytes(pid: int) -> int:
    """Memory a process holds alone (its unique set: private clean and dirty pages), 0 if gone.
    A forked data-loader worker shares the trial's pages; only what it adds is counted."""
    total = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


def _multiprocessing_helpers() -> set[int]:
    # A process that started workers has the forkserver and resource tracker as children: they
    # are not the trial's (an in-process measurement after an isolated one must not count them).
    from multiprocessing import forkserver, resource_tracker

    pids = {
        getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None),
        getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None),
    }
    return {pid for pid in pids if pid is not None}


class ChildMemorySampler:
    """Samples the private memory of this process's children (data-loader workers) until stopped;
    keeps the largest total. Without children it finds nothing and costs a directory read."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.peak_bytes = 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="autotune-children", daemon=True)
        self._thread.start()

    def stop(self) -> int:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.sample()
        return self.peak_bytes

    def sample(self) -> None:
        helpers = _multiprocessing_helpers()
        held = sum(private_bytes(pid) for pid in child_pids() if pid not in helpers)
        self.peak_bytes = max(self.peak_bytes, held)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()


@dataclass
class PeakMemoryMeter:
    """Measures the peak memory of the code between `reset` and `read`.

    Attributes:
        device: ``"cuda"`` or ``"cpu"``.
    """

    device: str
    nvml: NvmlSampler | None = field(default=None, repr=False)
    children: ChildMemorySampler = field(default_factory=ChildMemorySampler, repr=False)

    def reset(self) -> None:
        release_device_memory()
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            if self.nvml is None:
                self.nvml = NvmlSampler(torch.cuda.current_device())
            self.nvml.start()
            return
        try:
            _CLEAR_REFS.write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
            self._resettable = True
        except OSError:
            self._resettable = False
        self._start_rss = _status_bytes("VmRSS")
        self.children.start()

    def read(self) -> dict[str, int | str | None]:
        """The trial's peak and its parts, as user attrs (bytes)."""
        if self.device == "cuda":
            torch.cuda.synchronize()
            allocated = int(torch.cuda.max_memory_allocated())
            reserved = int(torch.cuda.max_memory_reserved())
            nvml_peak = self.nvml.stop() if self.nvml is not None else None
            return {
                "peak_memory_bytes": max(reserved, nvml_peak or 0),
                "peak_allocated_bytes": allocated,
                "peak_reserved_bytes": reserved,
                "peak_nvml_bytes": nvml_peak,
                "memory_source": "cuda_allocator+nvml" if nvml_peak else "cuda_allocator",
            }
        peak = _status_bytes("VmHWM")
        children = self.children.stop()
        return {
            # The process's own peak, plus what its data-loader workers held at their largest.
            "peak_memory_bytes": peak + children if peak is not None else None,
            "peak_children_bytes": children,
            "rss_start_bytes": getattr(self, "_start_rss", None),
            "memory_source": "rss_hwm" if getattr(self, "_resettable", False) else "rss_hwm_process",
        }
