"""Decisions: how often an answer finds a real speedup, claims a false one, holds what a user
re-measures, what its rounds cost and how wide it states them, with the code of commit `--before`
beside this checkout's, in one run.

    python -m benchmarks.decisions --before 43555e8            # everything: about 90 minutes on 2 cores
    python -m benchmarks.decisions --before 43555e8 --searches 1 --only power --seconds 5   # a smoke run

Parts (``--only`` picks some; the stored figures of the others are kept; ``--code after`` runs only
that code's searches of them, keeping the other code's stored rows, each row naming its commit):

- ``check``: each one-knob change of the two spaces measured beside their defaults (as
  `aa_check.check_space`): in the power space only checkpointing off is faster (about 1.3x), in
  the A/A space every change is slower.
- ``aa`` and ``power``: ``--searches`` searches of each space per code (seeds 0, 1, ...), alternately
  before and after, each a fresh process and store. The power space's defaults carry gradient
  checkpointing (``--base-args``), as a user's own run does; the same configuration without it is
  the space's one faster one, and it keeps the training math.
- ``slow``: one search per code whose steps take a second or more (a larger model built here).
- ``heldout``: the 12-trial search of a Qwen2-style model that is not a preset (5 knobs, 32
  combinations, sequence length 256) per code; every configuration of its grid measured once with
  the search's trial code, then the grid's best three, each code's pick and the defaults
  re-measured in fresh plain-Trainer processes, in ``--rounds`` interleaved rounds.
- ``coverage``: every configuration an ``aa`` or ``power`` answer states an interval for (its pick,
  else the alternative it names) re-measured against that search's defaults in fresh
  plain-Trainer processes (`user_run`), ``--rounds`` rotated rounds of ``--seconds``; an answer's
  interval holds when the user's ratio lies inside it.

Results: ``results/decisions.json`` and its section (`render`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from benchmarks import report
from benchmarks.aa_check import check_space
from benchmarks.assemble import store
from benchmarks.fresh_contenders import rates_of, rotated_rounds
from benchmarks.harness import Bench, machine, run_search, worktree
from benchmarks.report import fill, section, summary, table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "decisions.json"
AA_SPACE, POWER_SPACE = HERE / "space_aa.yaml", HERE / "space_power.yaml"
SEARCHED = ("aa", "power", "slow", "heldout")  # the parts that run searches, in their order
PARTS = ("check", *SEARCHED, "coverage")
CODES = ("before", "after")
# the bars
POWER_BAR, CLAIMS_BAR, COVERAGE_BAR, SHARE_BAR, HALF_WIDTH_BAR = 0.9, 0.1, 0.9, 0.30, math.log(1.15)
HELD_OUT_BAR, HELD_OUT_WALL_S = 0.97, 180.0

QWEN = {  # a Qwen2-style model, not a preset: built from this config with random weights
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 4096,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
}
HELD_OUT_SPACE = {
    "per_device_train_batch_size": [8, 16],
    "precision": ["fp32", "bf16"],
    "attn_implementation": ["sdpa", "eager"],
    "activation_checkpointing": [False, True],
    "optim": ["adamw_torch_fused", "adamw_torch"],
}
SLOW = {
    **QWEN,
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
}
SLOW_SPACE = {"precision": ["fp32", "bf16"], "attn_implementation": ["sdpa", "eager"]}

# Run in the child process (this checkout's code or the worktree's): one search, its figures as
# the last line of stdout (JSON). Written for both codes: what one of them lacks is None.
CHILD = r"""
import json, math, statistics, sys, time
spec = json.loads(sys.argv[1])
import autotune
from autotune.records import read_study
began = time.perf_counter()
result = autotune.search(**spec)
wall = time.perf_counter() - began
record, answer = read_study(result.study), result.answer
def figure(choice):
    if choice is None:
        return None
    speedup = choice.speedup
    # the batch split as the trial applied it: under a fixed global batch the accumulation
    # steps follow from the batch and are no sampled knob
    split = {k: v for k, v in (getattr(choice, "training_args", None) or {}).items()
             if k in ("per_device_train_batch_size", "gradient_accumulation_steps")}
    return {"trial": choice.trial, "params": {**dict(choice.params), **split},
            "speedup": speedup.to_dict() if speedup is not None else None,
            "tokens_per_s": choice.tokens_per_s.to_dict() if choice.tokens_per_s else None}
claims = answer.choice is not None and not answer.choice.is_defaults
stated = figure(answer.choice if claims else answer.alternative)
spent = record.time_breakdown or {}
out = {
    "wall_s": wall, "search_wall_s": spent.get("wall_s"), "stages": spent.get("stages"),
    "rule": answer.rule, "verdict": answer.verdict, "claims": claims, "stated": stated,
    "aa": answer.aa.to_dict() if answer.aa else None,
    "baseline_params": dict(record.baseline.params),
    "baseline_search_tokens_per_s": record.baseline.tokens_per_s,
    "baseline_rounds_tokens_per_s": record.baseline.remeasured_median,
    "rounds": max((len(f.rounds or f.tokens_per_s) for f in record.finalists), default=0),
    "measurements": sum(len(f.tokens_per_s) for f in record.finalists),
    "finalists": [{"number": f.number, "rounds": f.rounds, "scores": f.scores or f.tokens_per_s,
                   "positions": getattr(f, "positions", None)} for f in record.finalists],
    "rounds_looks": getattr(record, "rounds_looks", None),
    "rounds_look": getattr(record, "rounds_look", None),
}
try:  # this checkout's rounds model: what leaving disturbed windows out changed
    try:  # where this checkout keeps it
        from autotune.answer.instrument import rounds_fit
    except ImportError:
        from autotune.driver.answer import rounds_fit
    from autotune.measure.rounds import cells_of, fit_rounds
    finalists = {f.number: f for f in record.finalists}
    look = {"look": record.rounds_look} if hasattr(record, "rounds_look") else {}  # where recorded
    fit = rounds_fit(finalists, record.rounds_looks, *look.values())
    if fit is not None and stated is not None and stated["trial"] is not None:
        cells = cells_of({n: f.scores_by_round() for n, f in finalists.items()},
                         {n: f.positions_by_round() for n, f in finalists.items()})
        plain = fit_rounds(cells, robust=False, looks=record.rounds_looks, **look)
        kept = plain.ratio(stated["trial"], -1) if plain is not None else None
        out["level"] = fit.level  # the look's confidence level, as the search's code set it
        out["excluded"] = len(fit.excluded)
        out["without_exclusion"] = kept.to_dict() if kept is not None else None
except ImportError:
    pass
print(json.dumps(out))
"""


def _write_model(folder: Path, name: str, config: dict[str, Any]) -> str:
    path = folder / name
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def _write_space(folder: Path, name: str, knobs: dict[str, list[Any]]) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"knobs": knobs}))
    return str(path)


def specs(folder: Path, trials: int) -> dict[str, dict[str, Any]]:
    """The searches of each part, by part (the seed and the store are added per search)."""
    base = folder / "checkpointing.json"
    base.write_text(json.dumps({"gradient_checkpointing": True}))
    tiny = {"model": "tiny-gpt2", "seq_len": 256, "global_batch_size": 8, "trials": trials}
    return {
        "aa": {**tiny, "space": str(AA_SPACE)},
        "power": {**tiny, "space": str(POWER_SPACE), "base_args": str(base)},
        "slow": {
            "model": _write_model(folder, "slow-qwen2", SLOW),
            "space": _write_space(folder, "slow", SLOW_SPACE),
            "seq_len": 512,
            "trials": 4,
        },
        "heldout": {
            "model": _write_model(folder, "heldout-qwen2", QWEN),
            "space": _write_space(folder, "heldout", HELD_OUT_SPACE),
            "seq_len": 256,
            "trials": 12,
        },
    }


def one_search(code: Path, spec: dict[str, Any], store: Path, seed: int) -> dict[str, Any]:
    """One search in a fresh process with `code` first on the path: its figures (`CHILD`)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    full = {**spec, "seed": seed, "storage": f"sqlite:///{store}", "study": "decisions"}
    done, process_s = run_search(
        [sys.executable, "-c", CHILD, json.dumps(full)], 3600, env=env, cwd=store.parent
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    finalists = (figures.get("stages") or {}).get("finalists_s") or 0.0
    figures["finalists_share"] = (
        finalists / figures["search_wall_s"] if figures.get("search_wall_s") else None
    )
    return {**figures, "seed": seed, "process_s": process_s}


def run_searches(
    parts: list[str], codes: dict[str, Path], folder: Path, args: argparse.Namespace, cpu: str
) -> list[dict[str, Any]]:
    """Every search of `parts`, before and after alternately (the order flips each seed), each row
    naming `cpu`, the machine's (a rerun of some parts keeps the others' rows)."""
    plan = specs(folder, args.trials)
    runs = []
    for part in [p for p in SEARCHED if p in parts]:
        seeds = range(args.searches) if part in ("aa", "power") else range(1)
        for seed in seeds:
            order = list(CODES) if seed % 2 == 0 else list(CODES)[::-1]
            for code in (c for c in order if c in codes):
                store = folder / f"{part}-{code}-{seed}.db"
                row = {"part": part, "code": code, "commit": _commit(codes[code]), "cpu": cpu}
                row.update(one_search(codes[code], plan[part], store, seed))
                runs.append(row)
                print(
                    f"[{part} {code} {seed}] {row['wall_s']:.0f} s, {row['rule']}: {row['verdict']}",
                    flush=True,
                )
    return runs


def _after_commits(data: dict[str, Any]) -> list[str]:
    """The commits the after rows ran (a rerun of some parts adds one), else this checkout's."""
    runs = data.get("runs", [])
    commits = sorted({r["commit"] for r in runs if r.get("code") == "after" and r.get("commit")})
    return commits or [data["machine"]["commit"]]


def _commit(code: Path) -> str:
    """The short commit of the checkout `code` (a search's row names the code it ran)."""
    import subprocess

    done = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip()


def check(args: argparse.Namespace) -> dict[str, Any]:
    """Each space's one-knob changes beside its defaults (the power space's defaults checkpointed)."""
    return {
        "aa": check_space("tiny-gpt2", AA_SPACE, 256, 8, args.quads),
        "power": check_space(
            "tiny-gpt2", POWER_SPACE, 256, 8, args.quads, base={"activation_checkpointing": True}
        ),
    }


def heldout_grid(runs: list[dict[str, Any]], folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The held-out grid: every configuration measured once with the search's trial code, then the
    best three, each code's pick and the defaults re-measured in fresh plain-Trainer processes."""
    import itertools

    spec = specs(folder, args.trials)["heldout"]
    names = list(HELD_OUT_SPACE)
    grid = []
    with Bench(spec["model"], spec["space"], seq_len=256) as bench:
        defaults = bench.baseline()
        bench.measure(defaults, verbatim=True)  # the process's first measurement pays its warm-up
        for values in itertools.product(*HELD_OUT_SPACE.values()):
            params = {**defaults, **dict(zip(names, values, strict=True))}
            grid.append({"params": params, "tokens_per_s": bench.measure(params, verbatim=True).tokens_per_s})
            print(f"[grid] {values}: {grid[-1]['tokens_per_s']}", flush=True)
    ranked = sorted((g for g in grid if g["tokens_per_s"]), key=lambda g: -g["tokens_per_s"])
    contenders: dict[str, dict[str, Any]] = {"defaults": dict(defaults)}
    for i, g in enumerate(ranked[:3]):
        contenders[f"grid #{i + 1}"] = g["params"]
    for run in (r for r in runs if r["part"] == "heldout"):
        stated = run["stated"] if run["claims"] else None
        contenders[f"{run['code']}'s pick"] = stated["params"] if stated else dict(run["baseline_params"])
    rounds = rotated_rounds(
        spec["model"], contenders, args.rounds, args.seconds, 4 * args.seconds + 300, seq_len=256
    )
    rates = rates_of(rounds)
    medians = {name: statistics.median(r.values()) if r else None for name, r in rates.items()}
    best = max((m for n, m in medians.items() if n.startswith("grid") and m), default=None)
    return {"grid": grid, "contenders": contenders, "rounds": rates, "medians": medians, "best_grid": best}


def coverage(
    runs: list[dict[str, Any]], args: argparse.Namespace, kept: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Every stated configuration of the aa and power searches against its search's defaults, as a
    user re-measures them: name -> the user's ratio (`paired_speedup`), and each run's verdict.
    With ``--code``, only that code's answers are re-measured, and with ``--only aa`` or ``--only
    power`` beside ``coverage`` only that part's (the answers of this run: a user re-measures beside
    the searches, not hours after them); the other users are `kept` (the stored coverage's). The
    users are kept by code: every answer is judged by the users re-measured in its own code's run
    (a later run of the other code does not re-judge it), else, for users stored before they were
    kept by code, by the newest re-measure of its configuration."""
    from autotune.measure.stats import paired_speedup
    from autotune.progress import describe_params

    def key(run: dict[str, Any]) -> str:
        return f"{describe_params(run['baseline_params'])} | {describe_params(run['stated']['params'])}"

    answers = [r for r in runs if r["part"] in ("aa", "power") and r["stated"] is not None]
    groups: dict[str, dict[str, Any]] = {}  # defaults' description -> {defaults, configs}
    searched = [p for p in ("aa", "power") if p in (args.only or ())] or ["aa", "power"]
    for run in (r for r in answers if r["code"] in (args.code or CODES) and r["part"] in searched):
        defaults = dict(run["baseline_params"])
        group = groups.setdefault(
            describe_params(defaults), {"defaults": defaults, "configs": {}, "codes": set()}
        )
        group["codes"].add(run["code"])
        # the user's run: their defaults with the stated knobs over them
        group["configs"][describe_params(run["stated"]["params"])] = {**defaults, **run["stated"]["params"]}
    users: dict[str, Any] = dict((kept or {}).get("users") or {})
    for name_of_defaults, group in groups.items():
        contenders = {"defaults": group["defaults"], **group["configs"]}
        rounds = rotated_rounds(
            "tiny-gpt2", contenders, args.rounds, args.seconds, 4 * args.seconds + 300, seq_len=256
        )
        rates = rates_of(rounds)
        for name in group["configs"]:
            speedup = paired_speedup(rates[name], rates["defaults"])
            user = speedup.to_dict() if speedup is not None else None
            for code in group["codes"]:  # the codes of this run share its users
                users[f"{code} | {name_of_defaults} | {name}"] = user
    for run in answers:
        run["user"] = users.get(f"{run['code']} | {key(run)}", users.get(key(run)))
        run["holds"] = holds(run["stated"]["speedup"], run["user"])
    return {"users": users, "seconds": args.seconds}


def holds(stated: dict[str, Any] | None, user: dict[str, Any] | None) -> bool | None:
    """Whether the stated interval holds the user's ratio (None: nothing to compare)."""
    if not stated or not user or stated.get("low") is None or stated.get("high") is None:
        return None
    if not math.isfinite(stated["high"]):
        return None
    return bool(stated["low"] <= user["ratio"] <= stated["high"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the commit whose code is the 'before'")
    parser.add_argument("--only", choices=PARTS, action="append")
    parser.add_argument("--searches", type=int, default=10, help="searches per code of aa and power")
    parser.add_argument("--trials", type=int, default=6, help="trials per aa and power search")
    parser.add_argument("--quads", type=int, default=2, help="A B B A quads per change in the check")
    parser.add_argument("--rounds", type=int, default=3, help="the users' rotated rounds")
    parser.add_argument("--seconds", type=float, default=15.0, help="a user run's steady window")
    parser.add_argument(
        "--code",
        choices=CODES,
        action="append",
        help="run only this code's searches (the other's stored rows of those parts are kept)",
    )
    args = parser.parse_args()
    parts = args.only or list(PARTS)
    kept = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data: dict[str, Any] = {**kept, "machine": machine(), "before": args.before}
    command = "python -m benchmarks.decisions " + " ".join(sys.argv[1:])
    # a rerun of some parts or one code keeps the earlier commands: the section names them all
    earlier = kept.get("commands") or ([kept["command"]] if "command" in kept else [])
    data["commands"] = [*earlier, command] if parts != list(PARTS) or args.code else [command]
    data["command"] = command
    if "check" in parts:
        data["check"], data["check_cpu"] = check(args), data["machine"]["cpu"]
    with tempfile.TemporaryDirectory(prefix="bench-decisions-") as tmp, worktree(args.before, tmp) as old:
        assert old is not None  # --before is required
        data["before_commit"] = old[0]
        codes = {"before": old[1], "after": ROOT}
        codes = {code: path for code, path in codes.items() if code in (args.code or CODES)}
        runs = run_searches(parts, codes, Path(tmp), args, data["machine"]["cpu"])
        done = {(r["part"], r["code"]) for r in runs}
        runs = [r for r in data.get("runs", []) if (r["part"], r["code"]) not in done] + runs
        if "heldout" in parts:
            data["heldout"] = {**heldout_grid(runs, Path(tmp), args), "cpu": data["machine"]["cpu"]}
    if "coverage" in parts:
        data["coverage"] = coverage(runs, args, kept.get("coverage"))
    data["runs"] = runs
    store("decisions", data)


# -- the section ------------------------------------------------------------------------------------


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _x(speedup: dict[str, Any] | None) -> str:
    if not speedup:
        return "-"
    value = speedup.get("ratio", speedup.get("value"))
    low, high = speedup.get("low"), speedup.get("high")
    if low is None or high is None or not math.isfinite(high):
        return f"{value:.2f}x"
    return f"{value:.2f}x ({low:.2f}-{high:.2f}x)"


def _half(run: dict[str, Any]) -> float | None:
    """The stated interval's half-width in log terms (None: no interval)."""
    speedup = (run.get("stated") or {}).get("speedup") or {}
    value, high = speedup.get("value", speedup.get("ratio")), speedup.get("high")
    return math.log(high / value) if value and high and math.isfinite(high) else None


def _noise(run: dict[str, Any]) -> float | None:
    pooled = (run.get("aa") or {}).get("pooled")
    return None if pooled is None else math.exp(pooled) - 1


def _bonferroni_level(looks: int | None, look: int | None) -> float:
    """The level a look's intervals had before the search recorded it (a run without ``level``):
    half the 5% on the first look, the rest in equal parts on the later ones (a Bonferroni split)."""
    count = max(1, looks or 1)
    if count == 1:
        return 0.95
    if look is None:
        return 1 - 0.05 / count
    return 0.975 if look <= 1 else 1 - 0.025 / (count - 1)


def expected_hold(run: dict[str, Any]) -> float | None:
    """The chance that the user's ratio lands inside the stated interval were that interval honest:
    the user's re-measure has its own noise (`user["se"]`, log terms), so even an interval that
    holds the truth at its level holds the user's ratio less often. The user's log ratio is taken
    as normal about the stated estimate, with the search's standard error (the half-width over its
    t quantile: the look's level, the pooled noise's degrees of freedom) and the user's together.
    None where the run does not record them."""
    from autotune.measure.stats import t_quantile

    speedup, user = (run.get("stated") or {}).get("speedup") or {}, run.get("user") or {}
    df = (run.get("aa") or {}).get("pooled_df")
    if not speedup.get("low") or not math.isfinite(speedup.get("high") or math.inf) or not df:
        return None
    if user.get("se") is None or not math.isfinite(user["se"]):
        return None
    level = run.get("level") or _bonferroni_level(run.get("rounds_looks"), run.get("rounds_look"))
    centre, low, high = (math.log(speedup[k]) for k in ("value", "low", "high"))
    search_se = (high - low) / 2 / t_quantile(1 - (1 - level) / 2, df)
    sd = math.hypot(search_se, user["se"])

    def below(x: float) -> float:
        return 0.5 * (1 + math.erf((x - centre) / (sd * math.sqrt(2))))

    return below(high) - below(low)


# The fewest searches stating one configuration that `agreement` judges their intervals by.
AGREEMENT_LEAST = 3


def figures(runs: list[dict[str, Any]], code: str) -> dict[str, Any]:
    """One code's figures, side by side with the bars: the five the bars judge, and what tells the
    stated intervals' honesty apart from the users' noise (`expected_hold`, `agreement`)."""
    mine = [r for r in runs if r["code"] == code]
    power = [r for r in mine if r["part"] == "power"]
    aa = [r for r in mine if r["part"] == "aa"]
    found = [r for r in power if r["claims"] and ((r["stated"] or {}).get("speedup") or {}).get("low", 0) > 1]
    judged = [r for r in mine if r.get("holds") is not None]
    widths = [(_half(r), _noise(r)) for r in mine if r["part"] in ("aa", "power")]
    in_band = [h for h, n in widths if h is not None and n is not None and 0.06 <= n <= 0.08]
    return {
        "power": (len(found), len(power)),
        "claims": (sum(r["claims"] for r in aa), len(aa)),
        "coverage": (sum(bool(r["holds"]) for r in judged), len(judged)),
        "expected": [e for e in (expected_hold(r) for r in judged) if e is not None],
        "share": summary(r["finalists_share"] for r in mine),
        "half": summary(h for h, _ in widths),
        "half_in_band": summary(in_band),
        "noise": summary(n for _, n in widths),
        **agreement([r for r in mine if r["part"] in ("aa", "power")]),
    }


def agreement(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The stated intervals judged without a user's noise: where one configuration is stated by at
    least `AGREEMENT_LEAST` searches of a part, whether each one's interval holds the geometric mean
    of the others' estimates of it (95% intervals hold that, less the others' own noise, about as
    often as the truth), and the spread of those estimates between searches (log SD), beside the
    median stated half-width (log)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        speedup = (run.get("stated") or {}).get("speedup") or {}
        if speedup.get("low") and math.isfinite(speedup.get("high") or math.inf):
            key = (run["part"], json.dumps(run["stated"]["params"], sort_keys=True))
            groups.setdefault(key, []).append(speedup)
    held = judged = 0
    spreads, halves = [], []
    for stated in (g for g in groups.values() if len(g) >= AGREEMENT_LEAST):
        logs = [math.log(s["value"]) for s in stated]
        spreads.append(statistics.stdev(logs))
        for i, s in enumerate(stated):
            others = math.exp(statistics.fmean(logs[:i] + logs[i + 1 :]))
            held += s["low"] <= others <= s["high"]
            judged += 1
            halves.append(math.log(s["high"] / s["low"]) / 2)
    return {
        "agreement": (held, judged),
        "between_sd": summary(spreads),
        "stated_half": statistics.median(halves) if halves else None,
    }


def _expected(side: dict[str, Any]) -> str:
    chances = side["expected"]  # of the answers whose run records what the chance needs
    return f"{math.fsum(chances):.1f}/{len(chances)}" if chances else "-"


def _between(side: dict[str, Any]) -> str:
    if side["between_sd"].get("median") is None:
        return "-"
    spread = report.spread(side["between_sd"], lambda v: f"{100 * v:.1f}%")
    return f"{spread} beside ±{100 * side['stated_half']:.1f}%"


def _fraction(pair: tuple[int, int]) -> str:
    return f"{pair[0]}/{pair[1]}" if pair[1] else "-"


def _pct(stats: dict[str, Any], log: bool = False) -> str:
    if stats.get("median") is None:
        return "-"

    def fmt(v: float) -> str:
        return f"±{100 * (math.exp(v) - 1):.0f}%" if log else f"{100 * v:.1f}%"

    return report.spread(stats, fmt)


def render(data: dict[str, Any]) -> str:
    runs = data.get("runs", [])
    side = {code: figures(runs, code) for code in CODES}
    rows = [
        ["power: a 1.3x math-keeping speedup found", *(_fraction(side[c]["power"]) for c in CODES), "≥ 9/10"],
        [
            "safety: A/A searches that claim a speedup",
            *(_fraction(side[c]["claims"]) for c in CODES),
            "≤ 1/10",
        ],
        [
            "coverage: the user's ratio inside the stated interval",
            *(_fraction(side[c]["coverage"]) for c in CODES),
            "≥ 9/10",
        ],
        [
            "... expected of honest intervals, given the users' own noise",
            *(_expected(side[c]) for c in CODES),
            "",
        ],
        [
            "cost: the finalists' share of a search (median, min-max)",
            *(report.spread(side[c]["share"], lambda v: f"{100 * v:.0f}%") for c in CODES),
            "≤ 30% each",
        ],
        [
            "width: stated intervals' half-width (median, min-max)",
            *(_pct(side[c]["half"], log=True) for c in CODES),
            "≤ ±15%",
        ],
        [
            "... where the pooled noise is 6-8%",
            *(_pct(side[c]["half_in_band"], log=True) for c in CODES),
            "≤ ±15%",
        ],
        ["pooled noise of one measurement (median, min-max)", *(_pct(side[c]["noise"]) for c in CODES), ""],
        [
            f"agreement: the interval holds the other searches' estimate of its configuration "
            f"(≥ {AGREEMENT_LEAST})",
            *(_fraction(side[c]["agreement"]) for c in CODES),
            "",
        ],
        [
            "... those estimates' spread between searches (log SD), beside the median stated half-width",
            *(_between(side[c]) for c in CODES),
            "",
        ],
    ]
    headers = [
        "",
        f"before ({data.get('before_commit', data.get('before'))})",
        f"after ({', '.join(_after_commits(data))})",
        "bar",
    ]
    return section(
        "decisions",
        command="`, then `".join(data.get("commands") or [data["command"]]),
        summary=table(headers, rows),
        not_run=_not_run(runs, data),
        elsewhere=_elsewhere(runs, data),
        check=_check(data.get("check")),
        searches=_searches(runs),
        heldout=_heldout(data.get("heldout"), runs),
        coverage=_coverage(data.get("coverage")),
        robust=_robust(runs),
        **data["machine"],
    )


def _not_run(runs: list[dict[str, Any]], data: dict[str, Any]) -> str:
    """A line naming the parts this run has no figures of (their figures, not this machine's,
    stay in the history of ``results/decisions.json``)."""
    names = {"check": "the spaces' check", "slow": "the slow-step search", "heldout": "the held-out search"}
    ran = {r["part"] for r in runs} | ({"check"} if data.get("check") else set())
    missing = [names[p] for p in names if p not in ran]
    if not missing:
        return ""
    parts = " ".join(f"--only {p}" for p in names if names[p] in missing)
    return (
        f"\nNot in this run: {' and '.join(missing)} (`python -m benchmarks.decisions --before "
        f"{data.get('before')} {parts}` adds them); its cost figures are the A/A and power searches' only.\n"
    )


def _elsewhere(runs: list[dict[str, Any]], data: dict[str, Any]) -> str:
    """A line naming the figures kept from an earlier run on another machine than this section's
    (a rerun of some parts keeps the others' rows): figures of two machines are not compared
    with each other, and the table's rows that mix them say so here."""
    here = data["machine"]["cpu"]
    other: dict[str, list[str]] = {}
    for part in SEARCHED:
        for code in CODES:
            cpus = {r.get("cpu") for r in runs if r["part"] == part and r["code"] == code}
            for cpu in sorted(c for c in cpus if c and c != here):
                other.setdefault(cpu, []).append(f"the {part} searches of {code}")
    for name, cpu in (
        ("the spaces' check", data.get("check_cpu") if data.get("check") else None),
        ("the held-out grid", (data.get("heldout") or {}).get("cpu")),
    ):
        if cpu and cpu != here:
            other.setdefault(cpu, []).append(name)
    if not other:
        return ""
    kept = "; ".join(f"{', '.join(names)} on {cpu}" for cpu, names in other.items())
    split = [part for part in SEARCHED if len({r.get("cpu") or here for r in runs if r["part"] == part}) > 1]
    pairs = (
        f"the before and after of {', '.join(split)} were measured on different machines"
        if split
        else "each part's before and after were measured on one machine"
    )
    return (
        f"\nKept from an earlier run on another machine: {kept}. The table's rows hold them beside "
        f"this machine's ({here}); {pairs}.\n"
    )


def _searches(runs: list[dict[str, Any]]) -> str:
    rows = [
        [
            r["part"],
            r["code"],
            r["seed"],
            f"{r['wall_s']:.0f} s",
            _share(r["finalists_share"]),
            r.get("rounds", "-"),
            "-" if _noise(r) is None else f"{100 * _noise(r):.1f}%",
            _x((r.get("stated") or {}).get("speedup")),
            {True: "yes", False: "**no**", None: "-"}[r.get("holds")],
            _baseline_read(r),
            r["verdict"],
        ]
        for r in runs
    ]
    headers = ["part", "code", "seed", "wall", "finalists", "rounds", "noise", "stated", "holds"]
    rows = [
        [f"{row[0]}", f"{row[1]} {r.get('commit', '')}".strip(), *row[2:]]
        for row, r in zip(rows, runs, strict=True)
    ]
    return table([*headers, "baseline search/rounds", "verdict"], rows)


def _baseline_read(run: dict[str, Any]) -> str:
    search, rounds = run.get("baseline_search_tokens_per_s"), run.get("baseline_rounds_tokens_per_s")
    return f"{search / rounds:.2f}" if search and rounds else "-"


def _check(check: dict[str, Any] | None) -> str:
    if not check:
        return ""
    rows = []
    for space, found in check.items():
        for name, row in found["changes"].items():
            rows.append(
                [
                    space,
                    name,
                    _x(row["paired"]),
                    report.spread(summary(row["quad_ratios"]), lambda v: f"{v:.2f}x"),
                    "yes" if row["slower"] else "no",
                ]
            )
    return fill(
        "decisions",
        "check",
        table=table(["space", "change", "geometric mean (95% interval)", "per quad", "slower"], rows),
    )


def _heldout(heldout: dict[str, Any] | None, runs: list[dict[str, Any]]) -> str:
    if not heldout:
        return ""
    medians, best = heldout["medians"], heldout["best_grid"]
    rows = [[name, report.k(m), f"{m / best:.2f}" if m and best else "-"] for name, m in medians.items()]
    picks = {r["code"]: r for r in runs if r["part"] == "heldout"}
    lines = [
        f"- {code}: {r['wall_s']:.0f} s (finalists {_share(r['finalists_share'])}): {r['verdict']}"
        for code, r in picks.items()
    ]
    return fill(
        "decisions",
        "heldout",
        table=table(["configuration", "tokens/s (median)", "of the grid's best"], rows),
        picks="\n".join(lines),
    )


def _coverage(found: dict[str, Any] | None) -> str:
    if not found:
        return ""
    rows = [[name, _x(user), (user or {}).get("rounds", "-")] for name, user in found["users"].items()]
    return fill(
        "decisions",
        "coverage",
        seconds=found["seconds"],
        table=table(["defaults | configuration", "the user's ratio (95% interval)", "rounds"], rows),
    )


def _robust(runs: list[dict[str, Any]]) -> str:
    after = [r for r in runs if r["code"] == "after" and "excluded" in r]
    if not after:
        return ""
    hit = [r for r in after if r["excluded"]]
    rows = [
        [
            r["part"],
            r["seed"],
            r["excluded"],
            _x((r["stated"] or {}).get("speedup")),
            _x(r.get("without_exclusion")),
        ]
        for r in hit
    ]
    return fill(
        "decisions",
        "robust",
        searches=len(after),
        hit=len(hit),
        table=table(["part", "seed", "windows left out", "stated", "had they stayed"], rows) if rows else "",
    )


if __name__ == "__main__":
    main()
