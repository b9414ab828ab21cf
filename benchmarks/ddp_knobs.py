"""What each of DDP's own knobs changes, in 2-rank trials on this CPU (gloo), against the default.

    python benchmarks/ddp_knobs.py      # about 10 minutes on 2 CPU cores

Each configuration is one real trial of ``autotune search --nproc-per-node 2`` (a fresh torchrun
group of two processes), tiny-llama at sequence length 128, batch 8 per rank, fp32; the default
leaves every DDP setting to the Trainer and torch, as ``TrainingArguments()`` does (find unused
parameters on, since checkpointing is off; 25 MiB buckets; no static graph; buffers broadcast).
Each other configuration changes one knob. Three rounds in rotated order, each its own study; the
trial records what its DDP wrapper really ran with (``ddp``). Results go to
``benchmarks/results/ddp_knobs.json`` and ``benchmarks/sections/ddp_knobs.md``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "ddp_knobs.json"
SECTION = HERE / "sections" / "ddp_knobs.md"
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


def section(data: dict[str, Any]) -> str:
    from harness import ratio_table

    m = data["machine"]
    return "\n".join(
        [
            "## DDP's own knobs (2 ranks, gloo, CPU)\n",
            f"`python benchmarks/ddp_knobs.py`, {m['date']}, commit {m['commit']}: {m['cpu']}, "
            f"torch {m['torch']}, transformers {m['transformers']}. tiny-llama, sequence length 128, batch 8 "
            "per rank, fp32, `--nproc-per-node 2` (both ranks share the machine's cores). Each configuration "
            f"changes one knob from the default; one trial per round, {data['rounds']} rounds in rotated "
            "order. Tokens/s is the whole group's.\n",
            *ratio_table(data["summary"], "default"),
            "\nA ratio within the rounds' spread is no measurable change. On a GPU, where the "
            "all-reduce overlaps a backward pass that is much faster than here, the bucket size and the "
            "unused-parameter search weigh differently: these CPU figures say what each knob does to the "
            "step, not what it is worth on a GPU.\n",
        ]
    )


def main() -> None:
    sys.path.insert(0, str(HERE))
    from harness import enqueued_rounds, machine, write_section

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
    write_section(result, RESULTS, SECTION, section)


if __name__ == "__main__":
    main()
