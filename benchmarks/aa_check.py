"""An A/A benchmark: searches over a space in which the defaults are the fastest configuration.

    python -m benchmarks.aa_check                     # 10 searches of 6 trials, 15-25 minutes on 2 cores
    python -m benchmarks.aa_check --searches 2 --trials 3 --check-quads 1 --measure-steps 5   # a smoke run

Every value of `benchmarks/space_aa.yaml` other than the defaults' is slower on a 2-core CPU, so
every speedup a search over it claims is one the instrument made up (the issue's bar: at most 1 in
10 searches). The space check confirms that first on this machine: each one-knob change of the
defaults is measured beside them (`harness.Bench`) in ``--check-quads`` quads of A B B A (then
B A A B); it is slower when its median quad (better window over the defaults' better window) and
its best window against the defaults' best are both under 1. Then ``--searches`` searches (seeds
0, 1, ..., a fresh store each, the default finalists); one *claims a speedup* when its answer is
not the defaults. Per search: seed, rule, verdict, stated speedup and interval, the answer's A/A
figure, wall time, the finalists' share and the trials measured faster than the baseline.
Results: ``results/aa_check.json`` and its section (`render`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from autotune.answer.model import Answer
from autotune.measure.stats import paired_speedup
from autotune.progress import format_value, short_name
from autotune.records import read_study
from benchmarks.assemble import store
from benchmarks.harness import Bench, machine
from benchmarks.report import fill, section, summary, table

HERE = Path(__file__).resolve().parent

SPACE = HERE / "space_aa.yaml"
BATCH, ACCUMULATION = "per_device_train_batch_size", "gradient_accumulation_steps"
ALLOWED_CLAIMS_PER_10 = 1  # the bar


def space_knobs(space: Path) -> dict[str, list[Any]]:
    return {name: list(values) for name, values in yaml.safe_load(space.read_text())["knobs"].items()}


def space_defaults(knobs: dict[str, list[Any]], baseline: dict[str, Any]) -> dict[str, Any]:
    """The defaults' value of each knob of the space (`baseline`: all of their knob values on this
    machine); a space that does not hold them cannot be an A/A space."""
    missing = [f"{k}={baseline.get(k)!r}" for k, values in knobs.items() if baseline.get(k) not in values]
    if missing:
        raise SystemExit(f"the space does not hold the defaults' values: {', '.join(missing)}")
    return {name: baseline[name] for name in knobs}


def one_knob_changes(
    knobs: dict[str, list[Any]], defaults: dict[str, Any], global_batch: int | None
) -> dict[str, dict[str, Any]]:
    """Each configuration that changes one knob of the defaults to another value of the space
    (under a global batch, a batch comes with the accumulation that keeps it), by label."""
    changes = {}
    for name, values in knobs.items():
        if name == ACCUMULATION and global_batch:
            continue  # derived from the batch
        for value in values:
            if value == defaults[name]:
                continue
            change = {name: value}
            label = f"{short_name(name)}={format_value(value)}"
            if name == BATCH and global_batch and ACCUMULATION in knobs:
                change[ACCUMULATION] = global_batch // int(value)
                label += f"x{change[ACCUMULATION]}"
            changes[label] = change
    return changes


def _beside_defaults(
    bench: Bench, baseline: dict[str, Any], change: dict[str, Any], quads: int
) -> dict[str, Any]:
    """One change measured in `quads` quads (A B B A, B A A B, ...; A the defaults): per quad its
    better window's tokens/s over the defaults' better window, and every window of both."""
    better: dict[str, dict[int, float]] = {"A": {}, "B": {}}
    rates: dict[str, list[float]] = {"A": [], "B": []}
    for quad in range(quads):
        got: dict[str, list[float]] = {"A": [], "B": []}
        for which in "ABBA" if quad % 2 == 0 else "BAAB":
            params = baseline if which == "A" else {**baseline, **change}
            rate = bench.measure(params, verbatim=True).tokens_per_s
            if rate:
                got[which].append(rate)
        if got["A"] and got["B"]:  # each side's better window of its two: the less disturbed one
            better["A"][quad], better["B"][quad] = max(got["A"]), max(got["B"])
        rates["A"] += got["A"]
        rates["B"] += got["B"]
    ratios = [better["B"][q] / better["A"][q] for q in better["A"]]
    paired = paired_speedup(better["B"], better["A"])
    return {
        "change": change,
        "tokens_per_s": rates["B"],
        "defaults_tokens_per_s": rates["A"],
        "quad_ratios": ratios,
        "paired": None if paired is None else paired.to_dict(),
        "median_ratio": statistics.median(ratios) if ratios else None,
    }


def check_space(
    model: str,
    space: Path,
    seq_len: int | None,
    global_batch: int | None,
    quads: int,
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Each one-knob change of the space measured right beside the defaults with the search's own
    trial code in this process (`harness.Bench`), `quads` quads each, and whether it is slower
    (`base`: knob values the defaults carry, as a user's base arguments set them)."""
    knobs = space_knobs(space)
    with Bench(model, str(space), seq_len=seq_len) as bench:
        baseline = {**bench.baseline(), **(base or {})}
        defaults = space_defaults(knobs, baseline)
        bench.measure(baseline, verbatim=True)  # the process's first measurement pays its warm-up
        rows: dict[str, Any] = {}
        for label, change in one_knob_changes(knobs, defaults, global_batch).items():
            rows[label] = _beside_defaults(bench, baseline, change, quads)
            quads_text = ", ".join(f"{r:.2f}x" for r in rows[label]["quad_ratios"])
            print(f"[check] {label}: quads {quads_text}", flush=True)
    best_base = max((r for row in rows.values() for r in row["defaults_tokens_per_s"]), default=None)
    for row in rows.values():
        best = max(row["tokens_per_s"]) / best_base if row["tokens_per_s"] and best_base else None
        row["best_over_best"] = best
        # Other jobs on the machine only slow a window down: slower by the median quad and by the
        # least disturbed windows (the change's best against the defaults' best), not by a mean.
        median = row["median_ratio"]
        row["slower"] = median is not None and median < 1 and best is not None and best < 1
    return {"quads": quads, "defaults": defaults, "defaults_best_tokens_per_s": best_base, "changes": rows}


def jsonable(value: Any) -> Any:
    """The answer's A/A figure, whatever its type (another part of issue 31 adds it)."""
    if value is None or isinstance(value, int | float | str | bool | list | dict):
        return value
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def _interval(choice: Any) -> dict[str, Any] | None:
    speedup = getattr(choice, "speedup", None)
    return None if speedup is None else speedup.to_dict()


def finalists_share(breakdown: dict[str, Any]) -> float | None:
    """The finalists' share of a search's wall time, from its stored time breakdown."""
    finalists_s, wall_s = (breakdown.get("stages") or {}).get("finalists_s"), breakdown.get("wall_s")
    return finalists_s / wall_s if finalists_s is not None and wall_s else None


def claims_speedup(answer: Answer) -> bool:
    """Whether the answer hands back a non-default configuration as the faster one."""
    return answer.choice is not None and not answer.choice.is_defaults


def one_search(seed: int, folder: Path, **search: Any) -> dict[str, Any]:
    import autotune

    began = time.monotonic()
    storage = f"sqlite:///{folder / f'aa{seed}.db'}"
    result = autotune.search(storage=storage, study=f"aa-{seed}", seed=seed, **search)
    wall_s = time.monotonic() - began
    answer, record = result.answer, read_study(result.study)
    breakdown = record.time_breakdown or {}
    base = record.baseline.tokens_per_s
    measured = [t for t in result.trials if t.tokens_per_s and t.number not in result.baseline_like]
    aa = getattr(answer, "aa", None)
    return {
        "seed": seed,
        "rule": answer.rule,
        "verdict": answer.verdict,
        "claims_speedup": claims_speedup(answer),
        "choice": answer.choice.label if answer.choice else None,
        "choice_params": dict(answer.choice.params) if answer.choice else None,
        "choice_speedup": _interval(answer.choice),
        "alternative": answer.alternative.label if answer.alternative else None,
        "alternative_params": dict(answer.alternative.params) if answer.alternative else None,
        "alternative_speedup": _interval(answer.alternative),
        "alternative_gain": answer.alternative_gain.to_dict() if answer.alternative_gain else None,
        "aa": jsonable(aa),
        "aa_text": aa.describe() if aa is not None and hasattr(aa, "describe") else None,
        "wall_s": wall_s,
        "study_wall_s": breakdown.get("wall_s"),
        "finalists_s": (breakdown.get("stages") or {}).get("finalists_s"),
        "finalists_share": finalists_share(breakdown),
        "time_breakdown": breakdown,
        "finalists_time": jsonable(getattr(answer, "finalists_time", None)),
        "baseline_tokens_per_s": base,
        "baseline_like": result.baseline_like,
        "finalists": [f.number for f in record.finalists],
        "trials": [
            {
                "number": t.number,
                "params": t.params,
                "state": t.state,
                "reason": t.reason,
                "tokens_per_s": t.tokens_per_s,
            }
            for t in result.trials
        ],
        "faster_than_baseline": sum(1 for t in measured if base and t.tokens_per_s > base),
        "measured_trials": len(measured),
        "answer": answer.to_dict(),
    }


def _x(interval: dict[str, Any] | None) -> str:
    if not interval:
        return "-"
    value = interval.get("value", interval.get("ratio"))
    low, high = interval.get("low"), interval.get("high")
    if low is None or high is None or not interval.get("rounds", 1) > 1:
        return f"{value:.2f}x"
    return f"{value:.2f}x ({low:.2f}-{high:.2f}x)"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _check(check: dict[str, Any] | None) -> str:
    if check is None:
        return fill("aa_check", "no_check")
    rows = [
        [
            name,
            ", ".join(f"{r:.2f}" for r in row["quad_ratios"]),
            "-" if row["paired"] is None else _x({**row["paired"], "value": row["paired"]["ratio"]}),
            _times(row["median_ratio"]),
            _times(row["best_over_best"]),
            "yes" if row["slower"] else "**no**",
        ]
        for name, row in check["changes"].items()
    ]
    headers = ["change", "per quad: its better window over the defaults'", "geometric mean (95% interval)"]
    headers += ["median quad", "its best / the defaults' best", "slower"]
    best = check["defaults_best_tokens_per_s"] / 1000
    return fill("aa_check", "check", quads=check["quads"], best=best, table=table(headers, rows))


def _aa_cell(search: dict[str, Any]) -> str:
    """The answer's A/A figure in a table cell: the two baseline measurements' mean and largest
    difference, where the stored figure has them; its own words otherwise."""
    aa = search["aa"]
    if isinstance(aa, dict) and {"offset", "largest", "rounds"} <= set(aa):
        mean, largest = math.exp(abs(aa["offset"])) - 1, math.exp(aa["largest"]) - 1
        return f"{100 * mean:.1f}% (at most {100 * largest:.1f}%, {aa['rounds']} rounds)"
    return search["aa_text"] or ("-" if aa is None else str(aa))


def _searches(searches: list[dict[str, Any]]) -> str:
    if not searches:
        return ""
    rows = []
    for s in searches:
        stated = s["choice_speedup"] if s["claims_speedup"] else s["alternative_speedup"]
        who = s["choice"] if s["claims_speedup"] else (s["alternative"] or "-")
        share = "-" if s["finalists_share"] is None else f"{100 * s['finalists_share']:.0f}%"
        rows.append(
            [
                s["seed"],
                s["rule"],
                f"{who}: {_x(stated)}",
                _aa_cell(s),
                f"{s['faster_than_baseline']}/{s['measured_trials']}",
                f"{s['wall_s']:.0f} s",
                share,
                s["verdict"],
            ]
        )
    shares = summary(s["finalists_share"] for s in searches)
    headers = ["seed", "rule", "stated speedup", "A/A difference", "trials over the baseline", "wall"]
    return fill(
        "aa_check",
        "searches",
        claims=sum(1 for s in searches if s["claims_speedup"]),
        count=len(searches),
        allowed=ALLOWED_CLAIMS_PER_10 * len(searches) // 10,
        wall=summary(s["wall_s"] for s in searches)["median"],
        shares=f"{100 * shares['median']:.0f}% ({100 * shares['min']:.0f}-{100 * shares['max']:.0f}%)"
        if shares["n"]
        else "-",
        table=table([*headers, "finalists", "verdict"], rows),
    )


def render(data: dict[str, Any]) -> str:
    fields = {key: data[key] for key in ("command", "model", "space", "global_batch", "trials", "finalists")}
    return section(
        "aa_check",
        seq_len=data["seq_len"] or "of the preset",
        finalist_rounds=data["finalist_rounds"],
        check=_check(data.get("check")),
        searches=_searches(data["searches"]),
        **fields,
        **data["machine"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=10)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--model", default="tiny-gpt2")
    parser.add_argument("--seq-len", type=int, default=256, help="tokens per sample")
    parser.add_argument("--space", type=Path, default=SPACE)
    parser.add_argument("--global-batch", type=int, default=8, help="0: free")
    parser.add_argument("--check-quads", type=int, default=3, help="A B B A quads per change (0: no check)")
    parser.add_argument("--measure-steps", type=int, default=None, help="a shorter window, for smoke runs")
    args = parser.parse_args()
    knobs = space_knobs(args.space)
    global_batch = args.global_batch or None
    workload = {"model": args.model, "seq_len": args.seq_len}
    began = time.monotonic()
    check = None
    if args.check_quads > 0:
        check = check_space(args.model, args.space, args.seq_len, global_batch, args.check_quads)
        for name, row in check["changes"].items():
            figures = f"median quad {_times(row['median_ratio'])}, best {_times(row['best_over_best'])}"
            print(f"[check] {name}: {figures} of the defaults'; slower: {row['slower']}", flush=True)
    searches = []
    with tempfile.TemporaryDirectory(prefix="bench-aa-") as folder:
        for seed in range(args.searches):
            row = one_search(
                seed,
                Path(folder),
                space=str(args.space),
                trials=args.trials,
                global_batch_size=global_batch,
                **workload,
                **({"measure_steps": args.measure_steps} if args.measure_steps else {}),
            )
            searches.append(row)
            claim = "CLAIMS a speedup" if row["claims_speedup"] else "no claim"
            print(f"[search {seed}] {row['wall_s']:.0f} s, {claim}: {row['verdict']}", flush=True)
    from autotune.options import RunConfig

    run = RunConfig()
    result = {
        "machine": machine(),
        "command": "python -m benchmarks.aa_check " + " ".join(sys.argv[1:]),
        "model": args.model,
        "seq_len": args.seq_len,
        "space": os.path.relpath(args.space, HERE.parent),
        "knobs": knobs,
        "global_batch": global_batch,
        "trials": args.trials,
        "measure_steps": args.measure_steps,
        "finalists": run.finalists,
        "finalist_rounds": run.finalist_rounds,
        "wall_s": time.monotonic() - began,
        "check": check,
        "claims": sum(1 for s in searches if s["claims_speedup"]),
        "searches": searches,
    }
    store("aa_check", result)


if __name__ == "__main__":
    main()
