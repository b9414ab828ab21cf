"""How far a trial's memory estimate is from its measured peak: from the eager probe alone, and from
the measured peaks of the study's earlier trials of its kind (compile backend and mode included).

    python -m benchmarks.memory_estimate [--trials N] [--seed S]   # about 10 minutes on 2 CPU cores

For each preset, one real search through the CLI (every trial in its own worker) over a space that
crosses what the probe measures with what it does not (``torch_compile`` off or inductor, activation
checkpointing off or on, four batch sizes). Every trained trial stores its estimate; a trial of a
kind an earlier trial measured stores the probe's figure beside it (``probe_activation_bytes``), so
both estimates of the same trial are compared with the same measured peak. Results go to
``benchmarks/results/memory_estimate.json`` and RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import optuna

from benchmarks.assemble import store
from benchmarks.report import fill, measured_on, section, table

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "memory_estimate.json"
PRESETS = ("tiny-gpt2", "tiny-llama")
SPACE = (
    "description: what the probe measures (eager) against what it does not (compile)\n"
    "knobs:\n"
    "  per_device_train_batch_size: [4, 8, 16, 32]\n"
    "  torch_compile: ['off', inductor]\n"
    "  activation_checkpointing: [false, true]\n"
    "  attn_implementation: [sdpa]\n"
)
SEQ_LEN = 128
RUN_TIMEOUT_S = 1800


def trial_rows(storage: str) -> list[dict[str, Any]]:
    """Every trained trial with a measured peak and an estimate, in trial order."""
    study = optuna.load_study(study_name=None, storage=storage)
    rows = []
    for trial in sorted(study.trials, key=lambda t: t.number):
        attrs = trial.user_attrs
        peak, parts = attrs.get("peak_memory_bytes"), attrs.get("memory_estimate")
        if not peak or not parts or "duplicate_of" in attrs:
            continue
        probe_total = parts["total_bytes"]
        if parts.get("activations_from_trials"):
            probe_total = parts["baseline_bytes"] + parts["static_bytes"] + parts["probe_activation_bytes"]
        rows.append(
            {
                "number": trial.number,
                "params": trial.params,
                "peak_bytes": int(peak),
                "children_bytes": attrs.get("peak_children_bytes"),
                "baseline_bytes": parts["baseline_bytes"],
                "static_bytes": parts["static_bytes"],
                "activation_bytes": parts["activation_bytes"],
                "probe_activation_bytes": parts.get("probe_activation_bytes", parts["activation_bytes"]),
                "estimate_bytes": int(parts["total_bytes"]),
                "probe_estimate_bytes": int(probe_total),
                "from_trials": parts.get("activations_from_trials") or [],
                "error": (parts["total_bytes"] - peak) / peak,
                "probe_error": (probe_total - peak) / peak,
            }
        )
    return rows


def run(preset: str, trials: int, seed: int, folder: Path) -> dict[str, Any]:
    space = folder / "space.yaml"
    space.write_text(SPACE)
    storage = f"sqlite:///{folder / f'{preset}.db'}"
    command = [
        sys.executable, "-m", "autotune", "search", "--model", preset, "--space", str(space),
        "--seq-len", str(SEQ_LEN), "--trials", str(trials), "--seed", str(seed), "--storage", storage,
        "--no-baseline", "--finalists", "0", "--screen-ratio", "0",
    ]  # fmt: skip
    from benchmarks.harness import run_search

    _, wall = run_search(command, RUN_TIMEOUT_S)
    return {"preset": preset, "seed": seed, "wall_s": wall, "trials": trial_rows(storage)}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and worst |error| of both estimates over the trials estimated from peaks, and of the
    estimate each trial used over all of them; the trials estimated from peaks also by compile
    (``eager``, ``compiled``), with their signed errors' range and what child processes held in
    every trial of the group."""
    calibrated = [r for r in rows if r["from_trials"]]

    def spread(values: list[float]) -> dict[str, float] | None:
        return {"mean_abs": statistics.fmean(values), "worst_abs": max(values)} if values else None

    def signed(values: list[float]) -> dict[str, float] | None:
        if not values:
            return None
        return {"mean_abs": statistics.fmean(abs(v) for v in values), "low": min(values), "high": max(values)}

    groups = {}
    for name, compiled in (("eager", False), ("compiled", True)):
        every = [r for r in rows if (r["params"].get("torch_compile", "off") != "off") == compiled]
        group = [r for r in every if r["from_trials"]]
        children = [int(r.get("children_bytes") or 0) for r in every]
        groups[name] = {
            "trials": len(group),
            "error": signed([r["error"] for r in group]),
            "probe_error": signed([r["probe_error"] for r in group]),
            "children_bytes": [min(children), max(children)] if children else None,
        }
    return {
        "trials": len(rows),
        "from_peaks": len(calibrated),
        "from_peaks_error": spread([abs(r["error"]) for r in calibrated]),
        "from_peaks_probe_error": spread([abs(r["probe_error"]) for r in calibrated]),
        "all_used_error": spread([abs(r["error"]) for r in rows]),
        "all_probe_error": spread([abs(r["probe_error"]) for r in rows]),
        "by_compile": groups,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--resummarize", action="store_true", help="recompute the stored results' summaries only"
    )
    args = parser.parse_args()
    if args.resummarize:
        data = json.loads(RESULTS.read_text())
        for stored in data["runs"]:
            stored["summary"] = summary(stored["trials"])
        RESULTS.write_text(json.dumps(data, indent=2) + "\n")
        return
    from benchmarks.harness import machine

    runs = []
    with tempfile.TemporaryDirectory(prefix="at-memory-estimate-") as scratch:
        for preset in PRESETS:
            folder = Path(scratch) / preset
            folder.mkdir()
            result = run(preset, args.trials, args.seed, folder)
            result["summary"] = summary(result["trials"])
            runs.append(result)
            print(json.dumps({"preset": preset, **result["summary"]}), flush=True)
    data = {"machine": machine(), "space": SPACE, "seq_len": SEQ_LEN, "trials": args.trials, "runs": runs}
    store("memory_estimate", data)


if __name__ == "__main__":
    main()


def _cell(error: dict[str, float] | None) -> str:
    return f"{100 * error['mean_abs']:.0f}% ({100 * error['worst_abs']:.0f}%)" if error else "-"


def _ranged(error: dict[str, float] | None) -> str:
    if not error:
        return "-"
    return f"{100 * error['mean_abs']:.0f}% ({100 * error['low']:+.0f}% to {100 * error['high']:+.0f}%)"


def render(data: dict[str, Any]) -> str:
    headers = ["preset", "trained trials", "estimated from peaks", "their error, from peaks: mean (worst)"]
    headers += [
        "the same trials' error, probe alone: mean (worst)",
        "every trial, as estimated: mean (worst)",
    ]
    headers += ["every trial, probe alone: mean (worst)"]
    keys = ("from_peaks_error", "from_peaks_probe_error", "all_used_error", "all_probe_error")
    rows = [
        [run["preset"], run["summary"]["trials"], run["summary"]["from_peaks"]]
        + [_cell(run["summary"][key]) for key in keys]
        for run in data["runs"]
    ]
    groups = [
        [
            run["preset"],
            name,
            group["trials"],
            _ranged(group["error"]),
            _ranged(group["probe_error"]),
            f"{group['children_bytes'][0] / 2**20:.0f}-{group['children_bytes'][1] / 2**20:.0f} MiB"
            if group.get("children_bytes")
            else "-",
        ]
        for run in data["runs"]
        for name, group in (run["summary"].get("by_compile") or {}).items()
        if group["trials"]
    ]
    group_headers = ["preset", "trials", "n", "from peaks: mean error, absolute (range)"]
    group_headers += ["probe alone: mean error, absolute (range)", "child processes"]
    return section(
        "memory_estimate",
        measured_on=measured_on(data),
        trials=data["trials"],
        seq_len=data["seq_len"],
        table=table(headers, rows),
        groups=fill("memory_estimate", "groups", table=table(group_headers, groups)) if groups else "",
    )


def claims(data: dict[str, Any]) -> list[str]:
    return [
        fill(
            "memory_estimate",
            "claim",
            preset=run["preset"],
            mean=100 * s["from_peaks_error"]["mean_abs"],
            worst=100 * s["from_peaks_error"]["worst_abs"],
            probe_mean=100 * s["from_peaks_probe_error"]["mean_abs"],
            probe_worst=100 * s["from_peaks_probe_error"]["worst_abs"],
            trials=s["from_peaks"],
        )
        for run in data["runs"]
        if (s := run["summary"])["from_peaks_error"] and s["from_peaks_probe_error"]
    ]
