"""LoRA against a full fine-tune of the same tiny Llama-style model, on the CPU: tokens/s, peak
memory, trainable parameters and the memory estimate's error of each.

    python benchmarks/lora.py [--trials N] [--seed S]   # about 2 minutes on 2 CPU cores

Two real searches through the CLI over the same space (every trial in its own worker process, so
each peak is its own process's), one with ``--peft lora`` (peft's defaults for Llama: rank 8 on
``q_proj`` and ``v_proj``) and one without. Each trained trial stores its throughput, peak,
trainable and total parameters and the estimate made before it ran. Results go to
``benchmarks/results/lora.json`` and ``benchmarks/sections/lora.md``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "lora.json"
SECTION = HERE / "sections" / "lora.md"
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
    sys.path.insert(0, str(HERE.parent))
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
        "--no-baseline", "--finalists", "0", "--screen-ratio", "0", "--max-steps", "12", *flags,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{name}: autotune search failed ({done.returncode}): {done.stderr[-2000:]}")
    return {"arm": name, "flags": flags, "wall_s": wall, "trials": trial_rows(storage)}


def render(data: dict[str, Any]) -> str:
    lines = [
        "### LoRA against a full fine-tune (CPU)",
        "",
        f"`python benchmarks/lora.py`: {data['model']}, seq len {data['seq_len']}, one search per arm "
        f"({data['trials']} trials, each in its own worker), {data['machine']['cpu']}, "
        f"{data['machine']['cores']} threads, torch {data['machine']['torch']}, {data['machine']['date']}.",
        "",
        "| arm | batch | tokens/s | peak | estimate | estimate error | trainable / total parameters |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for run in data["runs"]:
        for row in run["trials"]:
            if not row["tokens_per_s"]:
                lines.append(f"| {run['arm']} | {row['batch']} | {row['reason']}: {row['message']} | | | | |")
                continue
            error = row["estimate_error"]
            lines.append(
                f"| {run['arm']} | {row['batch']} | {row['tokens_per_s']:,.0f} | "
                f"{_mib(row['peak_bytes'])} | {_mib(row['estimate_bytes'])} | "
                f"{'' if error is None else f'{100 * error:+.1f}%'} | "
                f"{row['trainable_params']:,} / {row['total_params']:,} |"
            )
    lines += ["", *data["notes"], ""]
    return "\n".join(lines)


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
        out.append(
            f"- batch {batch}: LoRA runs at {ratio:.2f}x the full fine-tune's tokens/s, "
            f"its peak {abs(saved):,.0f} MiB {side}."
        )
    errors = [
        abs(r["estimate_error"]) for run in runs for r in run["trials"] if r["estimate_error"] is not None
    ]
    if errors:
        out.append(f"- memory estimate vs measured peak: mean |error| {100 * statistics.fmean(errors):.1f}%.")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from harness import machine, write_section

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
    write_section(data, RESULTS, SECTION, render)


if __name__ == "__main__":
    main()
