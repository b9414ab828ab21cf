"""End to end as a user re-measures it: each contender of the batch-ladder benchmark trained in a
fresh process by a plain transformers `Trainer` (`user_run.py`), in interleaved rounds.

    python -m benchmarks.fresh_contenders                 # the presets of results/ladder_quality.json
    python -m benchmarks.fresh_contenders --rounds 5 --seconds 30

`ladder_quality.py` measures its contenders in one long-lived process; a user's run is a fresh
process running `Trainer.train()`. This takes the contenders it stored (the defaults,
`auto_find_batch_size`'s batch, the pick), runs each in a fresh process per rotated round for a
steady window of `--seconds`, and states the pick's speedup over each other as the geometric mean of
the rounds' ratios with a 95% interval. Results: ``results/fresh_contenders.json`` and its section.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from autotune.measure.stats import paired_speedup
from benchmarks.assemble import store
from benchmarks.harness import machine
from benchmarks.report import fill, interval, k, section, separation, table

HERE = Path(__file__).resolve().parent

LADDER = HERE / "results" / "ladder_quality.json"
RESULTS = HERE / "results" / "fresh_contenders.json"
CONTENDERS = ("defaults", "auto_find_batch_size", "autotune")


def user_run(
    model: str, params: dict[str, Any], seconds: float, timeout_s: float, **spec_extra: Any
) -> dict[str, Any]:
    """One fresh process training `params` (`spec_extra`: more of `user_run.py`'s spec); its JSON
    line, or the reason it gave none."""
    spec = json.dumps({"model": model, "params": params, "seconds": seconds, **spec_extra})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "benchmarks.user_run", spec]
    # Its own session: a run past the bound is ended with everything it started (compile workers).
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    ) as child:
        try:
            stdout, stderr = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            return {"tokens_per_s": None, "error": f"no answer in {timeout_s:.0f} s"}
    lines = stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return {"tokens_per_s": None, "error": f"exit {child.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


def rotated_rounds(
    model: str,
    contenders: dict[str, dict[str, Any]],
    rounds: int,
    seconds: float,
    timeout_s: float,
    **spec_extra: Any,
) -> dict[str, dict[int, dict[str, Any]]]:
    """Each contender (name -> params) trained by `user_run` once per round, the order rotated each
    round so drift hits all alike: name -> round -> the run's JSON line (or its error)."""
    names = list(contenders)
    runs: dict[str, dict[int, dict[str, Any]]] = {name: {} for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            got = user_run(model, contenders[name], seconds, timeout_s, **spec_extra)
            runs[name][r] = got
            rate = got.get("tokens_per_s")
            shown = f"{rate / 1000:.1f}k tok/s" if rate else got.get("error")
            print(f"[fresh] {model} round {r + 1}: {name} {shown}", flush=True)
    return runs


def rates_of(runs: dict[str, dict[int, dict[str, Any]]]) -> dict[str, dict[int, float]]:
    """Name -> round -> tokens/s, for the rounds that measured one."""
    return {
        name: {r: got["tokens_per_s"] for r, got in by_round.items() if got.get("tokens_per_s")}
        for name, by_round in runs.items()
    }


def measure_preset(row: dict[str, Any], rounds: int, seconds: float, timeout_s: float) -> dict[str, Any]:
    model = row["model"]
    params = {name: dict(row["contenders"][name]["params"]) for name in CONTENDERS}
    runs = rotated_rounds(model, params, rounds, seconds, timeout_s)
    rates = rates_of(runs)
    out: dict[str, Any] = {"model": model, "contenders": {}}
    for name in CONTENDERS:
        values = list(rates[name].values())
        out["contenders"][name] = {
            "params": params[name],
            "tokens_per_s": [runs[name][r].get("tokens_per_s") for r in sorted(runs[name])],
            "median_tokens_per_s": statistics.median(values) if values else None,
            "runs": [runs[name][r] for r in sorted(runs[name])],
        }
    for other in ("defaults", "auto_find_batch_size"):
        speedup = paired_speedup(rates["autotune"], rates[other])
        out[f"pick_over_{other}"] = None if speedup is None else speedup.to_dict()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="presets (default: every one stored)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="steady window per run")
    parser.add_argument("--timeout", type=float, default=600.0, help="bound on one run's process")
    args = parser.parse_args()
    ladder = json.loads(LADDER.read_text())
    presets = [p for p in ladder["presets"] if not args.model or p["model"] in args.model]
    results = {
        "machine": machine(),
        "ladder_machine": ladder["machine"],
        "rounds": args.rounds,
        "seconds": args.seconds,
        "presets": [measure_preset(p, args.rounds, args.seconds, args.timeout) for p in presets],
    }
    store("fresh_contenders", results)


if __name__ == "__main__":
    main()


def _batch(contender: dict[str, Any]) -> Any:
    return contender["params"].get("per_device_train_batch_size")


def render(data: dict[str, Any]) -> str:
    rows = []
    for row in data["presets"]:
        c = row["contenders"]
        rows.append(
            [row["model"]]
            + [
                f"{k(c[name]['median_tokens_per_s'])} (bs {_batch(c[name])})"
                for name in ("defaults", "auto_find_batch_size", "autotune")
            ]
            + [interval(row["pick_over_defaults"]), interval(row["pick_over_auto_find_batch_size"])]
        )
    headers = [
        "preset",
        "defaults",
        "auto_find_batch_size",
        "autotune's pick",
        "pick vs defaults",
        "pick vs auto_find",
    ]
    return section(
        "fresh_contenders",
        rounds=data["rounds"],
        seconds=data["seconds"],
        ladder_date=data["ladder_machine"]["date"],
        ladder_cpu=data["ladder_machine"]["cpu"],
        table=table(headers, rows),
        **data["machine"],
    )


def claims(data: dict[str, Any]) -> list[str]:
    return [
        fill(
            "fresh_contenders",
            "claim",
            model=row["model"],
            label=label,
            interval=interval(s),
            separation=separation(s),
        )
        for row in data["presets"]
        for other, label in (("defaults", "the defaults"), ("auto_find_batch_size", "auto_find_batch_size"))
        if (s := row[f"pick_over_{other}"]) is not None
    ]
