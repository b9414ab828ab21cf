"""LoRA against a full fine-tune of the same tiny Llama-style model, on the CPU: tokens/s, peak
memory, trainable parameters and the memory estimate's error of each.

    python -m benchmarks.lora [--trials N] [--seed S]   # about 2 minutes on 2 CPU cores

Two real searches through the CLI over the same space (every trial in its own worker process, so
each peak is its own process's), one with ``--peft lora`` (peft's defaults for Llama: rank 8 on
``q_proj`` and ``v_proj``) and one without. Each trained trial stores its throughput, peak,
trainable and total parameters and the estimate made before it ran. Results go to
``benchmarks/results/lora.json`` and its RESULTS.md section (`render`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.assemble import store
from benchmarks.report import fill, section, table

HERE = Path(__file__).resolve().parent

MODEL = "tiny-llama"
SEQ_LEN = 128
SPACE = (
    "description: LoRA against a full fine-tune, same batches\n"
    "knobs:\n"
    "  per_device_train_batch_size: [4, 16]\n"
    "  attn_implementation: [sdpa]\n"
)
RUN_TIMEOUT_S = 300
ARMS = {"full fine-tune": [], "LoRA (--peft lora)": ["--peft", "lora"]}


def trial_rows(storage: str) -> list[dict[str, Any]]:
    """Every trained trial with its figures, in trial order."""
    import optuna

    from autotune.records import read_trial

    study = optuna.load_study(study_name=None, storage=storage)
    rows = []
    for record in sorted((read_trial(t) for t in study.trials), key=lambda t: t.number):
        if not record.trained or record.reused:
            continue
        rows.append(
            {
                "number": record.number,
                "batch": record.params.get("per_device_train_batch_size"),
                "tokens_per_s": record.tokens_per_s,
                "peak_bytes": record.peak_memory_bytes,
                "estimate_bytes": record.memory.estimate_bytes,
                "static_bytes": (record.memory.estimate or {}).get("static_bytes"),
                "estimate_error": record.memory.estimate_error,
                "trainable_params": record.trainable_params,
                "total_params": record.total_params,
                "mfu_flops_per_token": record.measurement.model_flops_per_token,
                "reason": record.reason,
                "message": record.message,
            }
        )
    return rows


def run(name: str, flags: list[str], trials: int, seed: int, folder: Path) -> dict[str, Any]:
    space = folder / "space.yaml"
    space.write_text(SPACE)
    storage = f"sqlite:///{folder / 'study.db'}"
    command = [
        sys.executable, "-m", "autotune", "search", "--model", MODEL, "--space", str(space),
        "--seq-len", str(SEQ_LEN), "--trials", str(trials), "--seed", str(seed), "--storage", storage,
        "--no-baseline", "--finalists", "0", "--screen-ratio", "0", "--measure-steps", "12", *flags,
    ]  # fmt: skip
    from benchmarks.harness import run_search

    _, wall = run_search(command, RUN_TIMEOUT_S)
    return {"arm": name, "flags": flags, "wall_s": wall, "trials": trial_rows(storage)}


def render(data: dict[str, Any]) -> str:
    rows = []
    for run in data["runs"]:
        for row in run["trials"]:
            if not row["tokens_per_s"]:
                rows.append([run["arm"], row["batch"], f"{row['reason']}: {row['message']}", "", "", "", ""])
                continue
            error = row["estimate_error"]
            rows.append(
                [
                    run["arm"],
                    row["batch"],
                    f"{row['tokens_per_s']:,.0f}",
                    _mib(row["peak_bytes"]),
                    _mib(row["estimate_bytes"]),
                    "" if error is None else f"{100 * error:+.1f}%",
                    f"{row['trainable_params']:,} / {row['total_params']:,}",
                ]
            )
    headers = [
        "arm",
        "batch",
        "tokens/s",
        "peak",
        "estimate",
        "estimate error",
        "trainable / total parameters",
    ]
    align = ["left", *["right"] * 5, "left"]
    return section(
        "lora",
        model=data["model"],
        seq_len=data["seq_len"],
        trials=data["trials"],
        **data["machine"],
        table=table(headers, rows, align),
        notes="\n".join(notes(data["runs"])),
    )


def _mib(value: Any) -> str:
    return "" if value is None else f"{value / 2**20:,.0f} MiB"


def notes(runs: list[dict[str, Any]]) -> list[str]:
    """The arms' throughput ratio at each batch, in words."""
    by_arm = {run["arm"]: {row["batch"]: row for row in run["trials"] if row["tokens_per_s"]} for run in runs}
    full, lora = by_arm.get("full fine-tune", {}), by_arm.get("LoRA (--peft lora)", {})
    out = []
    for batch in sorted(set(full) & set(lora)):
        ratio = lora[batch]["tokens_per_s"] / full[batch]["tokens_per_s"]
        saved = (full[batch]["peak_bytes"] - lora[batch]["peak_bytes"]) / 2**20
        side = "lower" if saved >= 0 else "higher"
        out.append(fill("lora", "ratio", batch=batch, ratio=ratio, saved=abs(saved), side=side))
    errors = [
        abs(r["estimate_error"]) for run in runs for r in run["trials"] if r["estimate_error"] is not None
    ]
    if errors:
        out.append(fill("lora", "error", error=100 * statistics.fmean(errors)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from benchmarks.harness import machine

    runs = []
    with tempfile.TemporaryDirectory(prefix="at-lora-") as scratch:
        for index, (name, flags) in enumerate(ARMS.items()):
            folder = Path(scratch) / str(index)
            folder.mkdir()
            runs.append(run(name, flags, args.trials, args.seed, folder))
    data = {
        "machine": machine(),
        "model": MODEL,
        "seq_len": SEQ_LEN,
        "space": SPACE,
        "trials": args.trials,
        "runs": runs,
        "notes": notes(runs),
    }
    store("lora", data)


if __name__ == "__main__":
    main()
