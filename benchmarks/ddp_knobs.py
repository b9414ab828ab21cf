"""What each of DDP's own knobs changes, in 2-rank trials on this CPU (gloo), against the default.

    python -m benchmarks.ddp_knobs      # about 10 minutes on 2 CPU cores

Each configuration is one real trial of ``autotune search --nproc-per-node 2`` (a fresh torchrun
group of two processes), tiny-llama at sequence length 128, batch 8 per rank, fp32; the default
leaves every DDP setting to the Trainer and torch, as ``TrainingArguments()`` does (find unused
parameters on, since checkpointing is off; 25 MiB buckets; no static graph; buffers broadcast).
Each other configuration changes one knob. Three rounds in rotated order, each its own study; the
trial records what its DDP wrapper really ran with (``ddp``). Results go to
``benchmarks/results/ddp_knobs.json`` and its RESULTS.md section (`render`).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.assemble import store
from benchmarks.report import ratio_table, section

HERE = Path(__file__).resolve().parent

# What the Trainer and torch run with when TrainingArguments leaves the DDP settings unset (as
# `TrainingArguments()` does): unused-parameter search on (checkpointing is off), 25 MiB buckets.
FIXED = {
    "per_device_train_batch_size": 8,
    "precision": "fp32",
    "ddp_find_unused_parameters": True,
    "ddp_bucket_cap_mb": 25,
    "ddp_static_graph": False,
    "ddp_broadcast_buffers": True,
}
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "ddp_find_unused_parameters=false": {"ddp_find_unused_parameters": False},
    "ddp_bucket_cap_mb=1": {"ddp_bucket_cap_mb": 1},
    "ddp_bucket_cap_mb=100": {"ddp_bucket_cap_mb": 100},
    "ddp_static_graph=true": {"ddp_static_graph": True},
    "ddp_broadcast_buffers=false": {"ddp_broadcast_buffers": False},
}
SPACE = {
    "per_device_train_batch_size": [8],
    "precision": ["fp32"],
    "ddp_find_unused_parameters": [True, False],
    "ddp_bucket_cap_mb": [1, 25, 100],
    "ddp_static_graph": [False, True],
    "ddp_broadcast_buffers": [True, False],
}
ROUNDS = 3


def render(data: dict[str, Any]) -> str:
    return section(
        "ddp_knobs",
        rounds=data["rounds"],
        table=ratio_table(data["summary"], "default"),
        **data["machine"],
    )


def main() -> None:
    from benchmarks.harness import enqueued_rounds, machine

    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as temp:
        measured = enqueued_rounds(
            {name: {**FIXED, **values} for name, values in CONFIGS.items()},
            SPACE,
            Path(temp),
            ROUNDS,
            model="tiny-llama",
            seq_len=128,
            nproc_per_node=2,
        )
    result = {"machine": machine(), "wall_s": time.monotonic() - began, "rounds": ROUNDS, **measured}
    store("ddp_knobs", result)


if __name__ == "__main__":
    main()
