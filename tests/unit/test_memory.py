"""Peak memory measurement: the CPU meter on real allocations, the NVML sampler on a fake NVML."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from autotune.measure.peak import NvmlSampler, PeakMemoryMeter


def test_cpu_meter_sees_a_real_allocation_between_reset_and_read() -> None:
    meter = PeakMemoryMeter("cpu")
    meter.reset()
    block = torch.ones(256 * 2**20 // 4)  # 256 MiB, touched
    del block
    measured = meter.read()
    assert measured["memory_source"] == "rss_hwm"
    assert measured["peak_memory_bytes"] - measured["rss_start_bytes"] >= 250 * 2**20
    meter.reset()  # a reset forgets the earlier peak
    again = meter.read()
    assert again["peak_memory_bytes"] - again["rss_start_bytes"] < 100 * 2**20


class FakeNvml:
    """Just enough of pynvml: a process list whose usage for this PID follows a script."""

    def __init__(self, usage_bytes: list[int], fail_init: bool = False) -> None:
        self.usage = list(usage_bytes)
        self.fail_init = fail_init
        self.lock = threading.Lock()

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> str:
        return "handle"

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return "handle"

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        with self.lock:
            used = self.usage.pop(0) if len(self.usage) > 1 else self.usage[0]
        other = SimpleNamespace(pid=os.getpid() + 1, usedGpuMemory=99 * 2**30)
        return [other, SimpleNamespace(pid=os.getpid(), usedGpuMemory=used)]


def test_nvml_sampler_keeps_the_peak_of_this_process_only() -> None:
    fake = FakeNvml([1 * 2**30, 3 * 2**30, 2 * 2**30, 2 * 2**30])
    sampler = NvmlSampler(interval_s=0.001, nvml=fake)
    sampler.start()
    deadline = time.monotonic() + 5
    while fake.usage[0] != 2 * 2**30 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sampler.stop() == 3 * 2**30  # not the other process's 99 GiB


def test_nvml_sampler_without_nvml_reports_nothing() -> None:
    sampler = NvmlSampler(nvml=FakeNvml([2**30], fail_init=True))
    sampler.start()
    assert sampler.stop() is None


@pytest.mark.gpu
def test_cuda_meter_reports_allocator_and_nvml() -> None:
    meter = PeakMemoryMeter("cuda")
    meter.reset()
    block = torch.ones(512 * 2**20 // 4, device="cuda")
    del block
    measured = meter.read()
    assert measured["peak_allocated_bytes"] >= 512 * 2**20
    assert measured["peak_memory_bytes"] >= measured["peak_reserved_bytes"]


def test_frozen_heap_keeps_old_objects_out_of_collections_and_new_garbage_collectable() -> None:
    import gc
    import weakref

    from autotune.measure.peak import frozen_heap

    class Node:
        pass

    assert gc.get_freeze_count() == 0
    with frozen_heap():
        assert gc.get_freeze_count() > 1000  # the libraries' objects
        cycle = Node()
        cycle.self = cycle  # type: ignore[attr-defined]
        alive = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert alive() is None, "garbage made inside the block must still be collected"
    assert gc.get_freeze_count() == 0


def test_cpu_meter_counts_what_child_processes_hold() -> None:
    """A data-loader worker's own memory is part of the trial's peak (its shared pages are not)."""
    import subprocess
    import sys

    meter = PeakMemoryMeter("cpu")
    meter.reset()
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; b = bytearray(200 * 2**20); time.sleep(1.5)"],
    )
    try:
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    measured = meter.read()
    assert measured["peak_children_bytes"] >= 190 * 2**20
    own = measured["peak_memory_bytes"] - measured["peak_children_bytes"]
    assert own < measured["rss_start_bytes"] + 100 * 2**20  # the parent itself allocated little
    meter.reset()
    assert meter.read()["peak_children_bytes"] == 0  # no children now
