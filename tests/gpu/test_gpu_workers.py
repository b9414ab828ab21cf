"""Isolated workers and DDP trials on CUDA GPUs.

Marked `gpu`; skipped where torch sees no CUDA device (CI has none). Run on a GPU machine with
`.venv/bin/python -m pytest -q tests/gpu`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import TrainerCallback

import autotune
from autotune.study.store import measured_count
from tests.helpers import FAST, write_space

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]


class DeviceRecorder(TrainerCallback):
    """Writes which GPU each worker trained on (its visible devices and the device's PCI bus)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        props = torch.cuda.get_device_properties(next(model.parameters()).device)
        seen = {
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "count": torch.cuda.device_count(),
            "bus": props.pci_bus_id if hasattr(props, "pci_bus_id") else props.name,
            "rank": os.environ.get("RANK", "0"),
        }
        with open(os.path.join(self.folder, f"{os.getpid()}.json"), "w") as handle:
            json.dump(seen, handle)


def test_each_worker_sees_only_its_own_gpu(tmp_path: Path) -> None:
    gpus = torch.cuda.device_count()
    records = tmp_path / "devices"
    records.mkdir()
    result = autotune.search(
        model="tiny-llama",
        space=write_space(
            tmp_path, {"per_device_train_batch_size": [64, 128], "precision": ["bf16", "fp32"]}
        ),
        trials=min(4, 2 * gpus),
        storage=f"sqlite:///{tmp_path / 'gpu.db'}",
        seq_len=128,
        measure=FAST,
        finalists=0,
        measure_baseline=False,
        callbacks=[DeviceRecorder(str(records))],
    )
    assert measured_count(result.study) == min(4, 2 * gpus)
    seen = [json.loads(p.read_text()) for p in records.glob("*.json")]
    assert seen and all(s["count"] == 1 for s in seen)  # one worker, one GPU
    assert {s["visible"] for s in seen} <= {str(i) for i in range(gpus)}
    for trial in result.study.trials:  # the allocator and NVML peaks come from the worker's own GPU
        if trial.state.name == "COMPLETE":
            assert trial.user_attrs["peak_memory_bytes"] >= trial.user_attrs["peak_allocated_bytes"] > 0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_ddp_trial_on_two_gpus(tmp_path: Path) -> None:
    result = autotune.search(
        model="tiny-llama",
        space=write_space(tmp_path, {"per_device_train_batch_size": [64], "precision": ["bf16"]}),
        trials=1,
        storage=f"sqlite:///{tmp_path / 'ddp.db'}",
        seq_len=128,
        measure=FAST,
        finalists=0,
        measure_baseline=False,
        nproc_per_node=2,
        ddp_timeout_s=120,
    )
    trial = result.study.trials[0]
    assert trial.state.name == "COMPLETE"
    assert trial.user_attrs["world_size"] == 2 and len(trial.user_attrs["rank_peak_memory_bytes"]) == 2
