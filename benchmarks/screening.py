"""What screening saves on a space where some configurations are far slower than the best.

    python -m benchmarks.screening [--repeats 2]     # 3-4 minutes per repeat on 2 CPU cores
    python -m benchmarks.screening --scenario heldout [--repeats 1]   # the issue's own search
    python -m benchmarks.screening --scenario heldout --before 7819f67   # ... and today's code too

The space crosses fp32 with bf16, which runs several times slower on a CPU without native bf16
(where the CPU has it, `slow_bf16.SlowBf16` slows bf16 steps tenfold, ``--simulate``). The same
12-trial search runs with screening off (``--screen-ratio 0``) and on (0.5), interleaved, each in a
fresh store; recorded per run: wall time, the winner and its re-measured tokens/s, the trials
screened out, the study's time breakdown. Scenarios: ``tiny`` (tiny-gpt2, seq 64, 16
configurations, windows of at most 10 s) and ``heldout``, the issue's held-out search (a 2.8M
Qwen2-style model from a local folder, seq 256, 32 configurations), whose picks and the defaults are
re-measured as a user does (`fresh_contenders.user_run`); ``--before REV`` runs it a third time with
commit REV's code (a git worktree; 7819f67 is before screening existed). Results:
``results/screening.json`` (``screening_heldout.json``) and their sections.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import optuna

from autotune.answer.race import race_of
from autotune.progress import describe_params
from autotune.records import read_study
from benchmarks.assemble import store
from benchmarks.report import fill, interval, k, measured_on, section, separation, table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
SPACE = """description: fp32 against bf16 (slow without native bf16), for the screening benchmark
knobs:
  per_device_train_batch_size: [4, 8, 16, 32]
  precision: [fp32, bf16]
  attn_implementation: [eager, sdpa]
"""
ARGS = ("--model", "tiny-gpt2", "--seq-len", "64", "--trials", "12", "--seed", "0", "--max-seconds", "10")
HELDOUT_SPACE = """description: the issue's held-out search, 32 configurations (bf16 slow without native bf16)
knobs:
  per_device_train_batch_size: [8, 16, 32, 64]
  precision: [fp32, bf16]
  optim: [adamw_torch, adamw_torch_fused]
  attn_implementation: [eager, sdpa]
"""
# A Qwen2-style shape of 2.8M parameters (tied embeddings), as the held-out model.
HELDOUT_SHAPE = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
}
HELDOUT_ARGS = ("--seq-len", "256", "--trials", "12", "--seed", "0")
SLOW_FACTOR = 10.0  # slow_bf16.SlowBf16's default
RUN_TIMEOUT_S = 3600  # one search; never wait forever on a stuck one


def write_heldout_model(folder: Path) -> tuple[str, int]:
    """The held-out model's config in `folder` (no weights: random init); its path, parameters."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**HELDOUT_SHAPE, architectures=["Qwen2ForCausalLM"])
    config.save_pretrained(folder)
    with torch.device("meta"):
        count = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    return str(folder), int(count)


def one_search(
    folder: Path,
    ratio: float | None,
    label: str,
    simulate: bool,
    args: tuple[str, ...],
    space_text: str,
    code: tuple[str, Path] | None = None,
) -> dict[str, Any]:
    """One search on a fresh store in `folder`: screening at `ratio` (None: the code of `code`, a
    commit and its worktree, which had no screening), bf16 slowed when `simulate`."""
    space = folder / "space.yaml"
    space.write_text(space_text)
    storage = f"sqlite:///{folder / f'{label}.db'}"
    command = [sys.executable, "-m", "autotune", "search", *args, "--space", str(space)]
    command += ["--storage", storage, "--study", "s", "--screen-ratio", str(ratio)]
    env = None
    if simulate or code is not None:  # through the library, which takes the slowing callback
        shown = "none" if ratio is None else str(ratio)
        command = [sys.executable, "-m", "benchmarks.screening", "--one", str(space), storage, shown]
        command += [json.dumps(args), str(simulate)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cwd = None
    if code is not None:  # run from its worktree: a forkserver puts its working folder first on sys.path;
        # this package (a regular one) still wins over the worktree's `benchmarks` folder of that era
        env, cwd = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code[1]), str(ROOT)])}, code[1]
    from benchmarks.harness import run_search

    _, wall_s = run_search(command, RUN_TIMEOUT_S, env=env, cwd=cwd)
    study = optuna.load_study(study_name="s", storage=storage)
    race = race_of(read_study(study))  # the finalists' leader, read from their stored rounds
    params = study.trials[race.leader].params if race is not None else None
    reasons = [t.user_attrs.get("reason") for t in study.trials]
    baseline = study.user_attrs.get("baseline") or {}
    bf16_s = [
        (t.datetime_complete - t.datetime_start).total_seconds()
        for t in study.trials
        if t.params.get("precision") == "bf16" and t.datetime_complete and t.datetime_start
    ]
    return {
        "screen_ratio": ratio,
        **({"code": code[0]} if code is not None else {}),
        "wall_s": wall_s,
        "winner": params,
        "winner_median_tokens_per_s": race.median_tokens_per_s if race is not None else None,
        "verdict": race.describe(params or {}) if race is not None else None,
        "speedup": race.speedup.to_dict() if race is not None and race.speedup is not None else None,
        "baseline_params": baseline.get("params"),
        "bf16_trials_s": sum(bf16_s),
        "trials": len(study.trials),
        "screened_out": reasons.count("screened_out"),
        "bf16_trials": sum(t.params.get("precision") == "bf16" for t in study.trials),
        "time_breakdown": study.user_attrs.get("time_breakdown"),
    }


def search_slowed(space: str, storage: str, ratio: float | None, args: list[str], simulate: bool) -> None:
    """The CLI's search of `args` through `autotune.search`, with bf16 steps slowed tenfold when
    `simulate`. `ratio` None: the code on ``PYTHONPATH`` predates screening (and its options)."""
    import autotune
    from autotune.options import MeasureSettings
    from benchmarks.slow_bf16 import SlowBf16

    values = dict(zip(args[::2], args[1::2], strict=True))
    settings: dict[str, Any] = {} if ratio is None else {"screen_ratio": ratio}
    if "--max-seconds" in values:
        settings["max_seconds"] = float(values["--max-seconds"])
    measure = MeasureSettings(**settings)
    rich = getattr(autotune, "RichReporter", None)
    if rich is None:  # before it was public
        from autotune.cli._render import RichReporter as rich
    with rich() as reporter:
        autotune.search(
            model=values["--model"],
            seq_len=int(values["--seq-len"]),
            trials=int(values["--trials"]),
            seed=int(values["--seed"]),
            space=space,
            storage=storage,
            study="s",
            measure=measure,
            reporter=reporter,
            callbacks=[SlowBf16(SLOW_FACTOR)] if simulate else [],
        )


def remeasure(
    model: str, runs: list[dict[str, Any]], simulate: bool, rounds: int, seconds: float
) -> dict[str, Any]:
    """Each run's pick and the `TrainingArguments()` defaults (the runs' baseline), each trained in a
    fresh plain-Trainer process per round (`fresh_contenders.rotated_rounds`); the
    picks' speedups over the defaults as paired geometric means with 95% t intervals."""
    from autotune.measure.stats import paired_speedup
    from autotune.progress import describe_params
    from benchmarks.fresh_contenders import rates_of, rotated_rounds

    # The defaults as this code's baseline reads them from `TrainingArguments()`; every pick on them.
    defaults = next(run["baseline_params"] for run in runs if "code" not in run)
    contenders: dict[str, dict[str, Any]] = {"defaults": defaults}
    for run in runs:
        if run.get("winner"):
            contenders.setdefault(describe_params(run["winner"]), {**defaults, **run["winner"]})
    names = list(contenders)
    extra: dict[str, Any] = {"seq_len": int(HELDOUT_ARGS[1])}
    if simulate:
        extra["slow_bf16"] = SLOW_FACTOR
    measured = rotated_rounds(model, contenders, rounds, seconds, 600.0, **extra)
    rates = rates_of(measured)
    errors = [
        f"{name} round {r + 1}: {got.get('error')}"
        for name, by_round in measured.items()
        for r, got in by_round.items()
        if not got.get("tokens_per_s")
    ]
    out: dict[str, Any] = {"rounds": rounds, "seconds": seconds, "errors": errors, "contenders": {}}
    for name in names:
        speedup = None if name == "defaults" else paired_speedup(rates[name], rates["defaults"])
        out["contenders"][name] = {
            "params": contenders[name],
            "tokens_per_s": [rates[name].get(r) for r in range(rounds)],
            "median_tokens_per_s": statistics.median(rates[name].values()) if rates[name] else None,
            "over_defaults": None if speedup is None else speedup.to_dict(),
        }
    return out


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        ratio = None if sys.argv[4] == "none" else float(sys.argv[4])
        search_slowed(sys.argv[2], sys.argv[3], ratio, json.loads(sys.argv[5]), sys.argv[6] == "True")
        return
    from benchmarks.harness import machine, worktree

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("tiny", "heldout"), default="tiny")
    parser.add_argument("--repeats", type=int, default=None, help="default: 2 (tiny), 1 (heldout)")
    parser.add_argument(
        "--simulate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="slow bf16 steps tenfold (default: where the CPU has native bf16)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="heldout: fresh re-measurement rounds")
    parser.add_argument("--seconds", type=float, default=20.0, help="heldout: steady window per run")
    parser.add_argument(
        "--before", metavar="REV", help="also run the search with the code of commit REV (today's search)"
    )
    args = parser.parse_args()
    heldout = args.scenario == "heldout"
    repeats = args.repeats or (1 if heldout else 2)
    simulate = machine()["native_bf16"] if args.simulate is None else args.simulate
    runs: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-screening-") as temp, worktree(args.before, temp) as code:
        search_args, space, shown_args = ARGS, SPACE, list(ARGS)
        if heldout:
            model, parameters = write_heldout_model(Path(temp) / "qwen2-2.8m")
            search_args, space = ("--model", model, *HELDOUT_ARGS), HELDOUT_SPACE
            shown_args = ["--model", "<qwen2-2.8m folder>", *HELDOUT_ARGS]
            extra["model_parameters"] = parameters
        for repeat in range(repeats):
            order: tuple[float | None, ...] = (0.0, 0.5) if repeat % 2 == 0 else (0.5, 0.0)  # drift hits both
            if code is not None:
                order = (None, *order)
            for ratio in order:
                folder = Path(temp) / f"{repeat}-{ratio}"
                folder.mkdir()
                run = one_search(
                    folder, ratio, "run", bool(simulate), search_args, space, code if ratio is None else None
                )
                run["repeat"] = repeat
                runs.append(run)
                shown = ("repeat", "screen_ratio", "wall_s", "winner", "screened_out")
                print(json.dumps({k: run[k] for k in shown}), flush=True)
        if heldout:
            extra["user_runs"] = remeasure(model, runs, bool(simulate), args.rounds, args.seconds)
    summary = {}
    for ratio in (None, 0.0, 0.5) if code is not None else (0.0, 0.5):
        mine = [r for r in runs if r["screen_ratio"] == ratio]
        summary[str(ratio) if ratio is not None else f"before {args.before}"] = {
            "median_wall_s": statistics.median(r["wall_s"] for r in mine),
            "winners": [r["winner"] for r in mine],
        }
    result = {
        "machine": machine(),
        "scenario": args.scenario,
        "args": shown_args,
        "space": space,
        "simulated_slow_bf16": bool(simulate),
        "runs": runs,
        "summary": summary,
        **extra,
    }
    print(json.dumps(summary, indent=1, default=str))
    store("screening_heldout" if heldout else "screening", result, indent=1)


if __name__ == "__main__":
    main()


# -- the RESULTS.md sections ----------------------------------------------------------------------


def _bf16_note(data: dict[str, Any]) -> str:
    """Whether the benchmark's CPU has native bf16, and whether bf16 was slowed."""
    bf16 = "native bf16" if data["machine"].get("native_bf16") else "no native bf16: bf16 is emulated"
    return fill(
        "screening",
        "bf16",
        bf16=bf16 + (fill("screening", "slowed") if data.get("simulated_slow_bf16") else ""),
    )


def _arm(runs: list[dict[str, Any]], arm: str) -> list[dict[str, Any]]:
    """The runs of one arm: ``before`` (an earlier commit's code, ``--before``), ``off`` or ``on``."""
    if arm == "before":
        return [r for r in runs if "code" in r]
    return [r for r in runs if "code" not in r and bool(r["screen_ratio"]) == (arm == "on")]


def _arm_label(run: dict[str, Any]) -> str:
    if "code" in run:
        return f"today's code ({run['code']}, no screening)"
    return "screening off" if not run["screen_ratio"] else f"screening on ({run['screen_ratio']:g})"


def _stage(run: dict[str, Any], name: str) -> float:
    return float(((run.get("time_breakdown") or {}).get("stages") or {}).get(name) or 0.0)


def _median_of(runs: list[dict[str, Any]], arm: str, what: str = "wall_s") -> float:
    """The median wall time (``wall_s``) or stage seconds of an arm's runs."""
    return statistics.median(r["wall_s"] if what == "wall_s" else _stage(r, what) for r in _arm(runs, arm))


def _common(data: dict[str, Any]) -> dict[str, Any]:
    runs = data["runs"]
    off, on = _median_of(runs, "off"), _median_of(runs, "on")
    before = _arm(runs, "before")
    if before:
        today = _median_of(runs, "before")
        picks = "; ".join(sorted({describe_params(r["winner"]) for r in before if r.get("winner")})) or "-"
        goal = "met" if on <= today / 3 else "NOT met"
        against = fill(
            "screening",
            "against_today",
            code=before[0]["code"],
            today=today,
            share=on / today,
            goal=goal,
            picks=picks,
        )
    return {
        "measured_on": measured_on(data),
        "bf16": _bf16_note(data),
        "before": "".join(f" --before {code}" for code in sorted({r["code"] for r in before})),
        "args": " ".join(data["args"]),
        "off": off,
        "on": on,
        "ratio": on / off,
        "against_today": against if before else fill("screening", "not_before"),
        "today": f"; today's code took {_median_of(runs, 'before'):.0f} s" if before else "",
    }


def _rows(runs: list[dict[str, Any]], last: Any, bf16_s: bool = False) -> list[list[Any]]:
    rows = []
    for run in runs:
        stages = [
            f"{_stage(run, s):.0f} s" if run.get("time_breakdown") else "-"
            for s in ("search_s", "finalists_s")
        ]
        row = [
            _arm_label(run).removeprefix("screening "),
            run["repeat"] + 1,
            f"{run['wall_s']:.0f} s",
            *stages,
        ]
        row += [run["screened_out"], run["bf16_trials"]] + (
            [f"{run.get('bf16_trials_s', 0):.0f} s"] if bf16_s else []
        )
        rows.append([*row, describe_params(run["winner"]) if run.get("winner") else "-", last(run)])
    return rows


HEADERS = ["screening", "run", "wall time", "trials stage", "finalists stage", "screened out", "bf16 trials"]


def _verdict(runs: list[dict[str, Any]]) -> str:
    picks = sorted({describe_params(r["winner"]) for r in runs if r.get("winner") and "code" not in r})
    if len(picks) <= 1:
        return "the same pick in every run"
    verdict = f"{len(picks)} different picks ({'; '.join(picks)})"
    if all("either is as good" in (r.get("verdict") or "") for r in runs if "code" not in r):
        verdict += ", each run's re-measurement calling its winner and runner-up a tie"
    return verdict


def render(data: dict[str, Any]) -> str:
    runs, common = data["runs"], _common(data)
    rows = _rows(runs, lambda run: k(run.get("winner_median_tokens_per_s")))
    outside = statistics.median(r["wall_s"] - _stage(r, "search_s") for r in _arm(runs, "on"))
    search_off, search_on = _median_of(runs, "off", "search_s"), _median_of(runs, "on", "search_s")
    return section(
        "screening",
        table=table([*HEADERS, "winner", "winner tok/s (re-measured)"], rows),
        verdict=_verdict(runs),
        search_on=search_on,
        search_off=search_off,
        search_ratio=search_on / search_off,
        outside=outside,
        outside_share=outside / common["off"],
        left=max(0.0, common["off"] / 3 - outside),
        **common,
    )


def claims(data: dict[str, Any]) -> list[str]:
    return [fill("screening", "claim", verdict=_verdict(data["runs"]), **_common(data))]


def render_screening_heldout(data: dict[str, Any]) -> str:
    runs, common, user = data["runs"], _common(data), data.get("user_runs")
    rows = _rows(runs, lambda run: interval(run.get("speedup")), bf16_s=True)
    headers = [*HEADERS, "time in bf16 trials", "winner", "the answer's speedup over the defaults"]
    answers = "".join(f"\n\nThe answer, {_arm_label(r)}: {r['verdict']}" for r in runs if r.get("verdict"))
    user_text = ""
    if user:
        rows_user = [
            [
                "`TrainingArguments()` defaults" if name == "defaults" else name,
                f"{k(row['median_tokens_per_s'])} ({', '.join(k(v) for v in row['tokens_per_s'])})",
                interval(row["over_defaults"]),
            ]
            for name, row in user["contenders"].items()
        ]
        errors = "\n\nRuns that gave no figure: " + "; ".join(user["errors"]) if user.get("errors") else ""
        user_text = fill(
            "screening",
            "user",
            seconds=user["seconds"],
            rounds=user["rounds"],
            table=table(["configuration", "tok/s, median (per round)", "over the defaults"], rows_user),
            errors=errors,
        )
    common["against_today"] = common["against_today"].strip()
    return (
        fill(
            "screening",
            "heldout",
            table=table(headers, rows),
            parameters=data.get("model_parameters", 0) / 1e6,
            answers=answers,
            user=user_text,
            **common,
        )
        + "\n"
    )


def claims_screening_heldout(data: dict[str, Any]) -> list[str]:
    runs, user, out = data["runs"], data.get("user_runs") or {}, []
    for name, row in (user.get("contenders") or {}).items():
        if row["over_defaults"]:
            by = " and ".join(
                _arm_label(r) for r in runs if r.get("winner") and describe_params(r["winner"]) == name
            )
            s = row["over_defaults"]
            out.append(
                fill(
                    "screening",
                    "heldout_pick",
                    by=by or "a run",
                    name=name,
                    interval=interval(s),
                    separation=separation(s),
                )
            )
    return [*out, fill("screening", "heldout_claim", **_common(data))]
