"""The A/B check: does the speedup a search states hold when a user re-measures it?

    python -m benchmarks.ab_check                      # tiny-gpt2, tiny-llama, tiny-bert: about 25 minutes
    # a smoke run:
    python -m benchmarks.ab_check --presets tiny-gpt2 --seconds 5 --rounds 1 --trials 3 --measure-steps 5

Per preset, a search as ``make run`` runs it (a fresh store); then the configuration its answer
speaks of and `TrainingArguments()`'s defaults are trained as a user trains them (`user_run.py`: a
fresh plain-Trainer process each, a window of ``--seconds``, ``--rounds`` rotated rounds). The
user's ratio is the geometric mean of the rounds' ratios with its 95% interval (`paired_speedup`).
The interval checked: the pick's (``pick``), else the alternative named beside the kept defaults
(``alternative``), else the defaults against themselves, stated 1.0x (``nothing``). The check
passes when it holds the user's ratio. Results: ``results/ab_check.json`` and its section.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.answer.model import Answer, Interval
from autotune.measure.stats import Speedup, paired_speedup
from autotune.progress import describe_params
from autotune.records import read_study
from benchmarks.aa_check import finalists_share, jsonable
from benchmarks.assemble import store
from benchmarks.fresh_contenders import rates_of, rotated_rounds
from benchmarks.harness import machine
from benchmarks.report import section, table

HERE = Path(__file__).resolve().parent

PRESETS = ("tiny-gpt2", "tiny-llama", "tiny-bert")  # the CPU presets; gpt2-124m and llama-1b are for GPUs
DEFAULTS, AGAIN = "defaults", "defaults again"


def contender(answer: Answer) -> tuple[str, dict[str, Any] | None, Interval | None]:
    """What the user re-measures against the defaults: (basis, knob values or None for the defaults
    themselves, the stated speedup over the baseline; None: the answer states none)."""
    choice, alternative = answer.choice, answer.alternative
    if choice is not None and not choice.is_defaults:
        return "pick", dict(choice.params), choice.speedup
    if alternative is not None and alternative.speedup is not None:
        return "alternative", dict(alternative.params), alternative.speedup
    return "nothing", None, Interval(1.0)


def contains(stated: Interval | None, user: Speedup | None) -> bool | None:
    """Whether the stated interval holds the user's ratio; a stated figure without an interval: whether
    the user's interval holds it. None: nothing stated, or the user measured no ratio."""
    if stated is None or user is None:
        return None
    if stated.low is not None and stated.high is not None and stated.rounds > 1:
        return bool(stated.low <= user.ratio <= stated.high)
    return bool(user.low <= stated.value <= user.high)


def check_preset(model: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    import autotune

    began = time.monotonic()
    result = autotune.search(
        model=model,
        space=args.space,
        trials=args.trials,
        seed=args.seed,
        storage=f"sqlite:///{folder / f'{model}.db'}",
        study=f"ab-{model}",
        **({"measure_steps": args.measure_steps} if args.measure_steps else {}),
    )
    search_s = time.monotonic() - began
    answer = result.answer
    breakdown = read_study(result.study).time_breakdown or {}
    basis, params, stated = contender(answer)
    name = "autotune" if params is not None else AGAIN
    said = "no stated speedup" if stated is None else stated.describe()
    print(f"[ab] {model}: {answer.verdict}; re-measuring {basis} ({said})", flush=True)
    contenders = {name: params or {}, DEFAULTS: {}}
    timeout_s = 4 * args.seconds + 300  # set-up, warm-up and a loaded machine
    runs = rotated_rounds(model, contenders, args.rounds, args.seconds, timeout_s)
    rates = rates_of(runs)
    user = paired_speedup(rates[name], rates[DEFAULTS])
    holds = contains(stated, user)
    shown = "-" if user is None else user.describe()
    print(f"[ab] {model}: the user's ratio {shown}; the stated interval holds it: {holds}", flush=True)
    return {
        "model": model,
        "rule": answer.rule,
        "verdict": answer.verdict,
        "basis": basis,
        "params": params,
        "stated": None if stated is None else stated.to_dict(),
        "user": None if user is None else user.to_dict(),
        "contains": holds,
        "runs": {n: [runs[n][r] for r in sorted(runs[n])] for n in runs},
        "search_s": search_s,
        "finalists_share": finalists_share(breakdown),
        "aa": jsonable(getattr(answer, "aa", None)),
        "medians": {n: statistics.median(r.values()) if r else None for n, r in rates.items()},
        "answer": answer.to_dict(),
    }


def _ratio(value: float, low: float | None, high: float | None, rounds: int) -> str:
    if low is None or high is None or rounds < 2:
        return f"{value:.2f}x"
    return f"{value:.2f}x ({low:.2f}-{high:.2f}x, {rounds} rounds)"


def _medians(medians: dict[str, float | None]) -> str:
    return ", ".join("-" if m is None else f"{m / 1000:.1f}k" for m in medians.values())


def _share(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _stated(stated: dict[str, Any] | None) -> str:
    return (
        "none" if stated is None else _ratio(stated["value"], stated["low"], stated["high"], stated["rounds"])
    )


def render(data: dict[str, Any]) -> str:
    rows = []
    for row in data["presets"]:
        user = row["user"]
        rows.append(
            [
                row["model"],
                row["rule"],
                row["basis"],
                "the defaults" if row["params"] is None else f"`{describe_params(row['params'])}`",
                _stated(row["stated"]),
                "-" if user is None else _ratio(user["ratio"], user["low"], user["high"], user["rounds"]),
                {True: "yes", False: "**no**", None: "-"}[row["contains"]],
                _medians(row["medians"]),
                f"{row['search_s']:.0f} s ({_share(row['finalists_share'])})",
            ]
        )
    headers = [
        "preset",
        "answer",
        "re-measured",
        "configuration",
        "stated over the baseline",
        "the user's ratio",
    ]
    headers += ["stated interval holds it", "user tokens/s (median): it, defaults", "search (finalists)"]
    fields = {key: data[key] for key in ("command", "space", "trials", "seed", "seconds", "rounds")}
    return section(
        "ab_check",
        table=table(headers, rows),
        held=sum(1 for row in data["presets"] if row["contains"]),
        count=len(data["presets"]),
        verdicts="\n".join(f"- {row['model']}: {row['verdict']}" for row in data["presets"]),
        **fields,
        **data["machine"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument("--space", default="quick", help="as make run (RUN_ARGS)")
    parser.add_argument("--trials", type=int, default=8, help="as make run (RUN_ARGS)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0, help="steady window per user run")
    parser.add_argument(
        "--measure-steps", type=int, default=None, help="shorter search windows, for smoke runs"
    )
    args = parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as folder:
        presets = [check_preset(model, Path(folder), args) for model in args.presets]
    result = {
        "machine": machine(),
        "command": "python -m benchmarks.ab_check " + " ".join(sys.argv[1:]),
        "space": args.space,
        "trials": args.trials,
        "seed": args.seed,
        "measure_steps": args.measure_steps,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "wall_s": time.monotonic() - began,
        "presets": presets,
    }
    store("ab_check", result)


if __name__ == "__main__":
    main()
