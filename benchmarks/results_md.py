"""Write ``benchmarks/RESULTS.md`` from the raw results in ``benchmarks/results/*.json``."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from autotune.progress import describe_params

REGRET_AT = ("10", "20", "40")
DEEPSPEED_TRIALS = (9, 35)  # DeepSpeed autotuner, experiments per model on its HF examples


def _load(results: Path, item: str) -> dict[str, Any] | None:
    path = results / f"{item}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _k(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:.1f}k"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f} MiB"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _trials(value: float, cap: int) -> str:
    return f">{cap}" if value > cap else f"{value:g}"


def write_results(results: Path, out: Path) -> Path:
    parts = ["# autotune benchmarks\n"]
    parts.append(
        "Written by `make bench` (`python benchmarks/bench.py`); the grids it replays are measured by "
        "`make bench-grid` (`python benchmarks/grid.py`). Every figure below was measured on the "
        "machine named under each section; nothing is copied from elsewhere except the reference "
        "points that say so.\n"
    )
    claims: list[str] = []
    sections = [
        _replay(_load(results, "replay"), claims),
        _quality(_load(results, "quality"), claims),
        _cost(_load(results, "cost"), _load(results, "quality")),
        _noise(_load(results, "noise"), claims),
        _isolation(_load(results, "isolation"), claims),
        _screening(_load(results, "screening"), claims),
        _screening_heldout(_load(results, "screening_heldout"), claims),
        _setup_cost(_load(results, "setup_cost"), claims),
        _memory_estimate(_load(results, "memory_estimate"), claims),
        _ladder_quality(_load(results, "ladder_quality"), claims),
        _fresh_contenders(_load(results, "fresh_contenders"), claims),
    ]
    parts.append("## Where autotune wins and where it does not\n")
    parts.extend(f"- {claim}" for claim in claims)
    parts.append("")
    parts.extend(s for s in sections if s)
    # Sections measured by hand or by the tests (reliability): kept as written, in name order.
    sections_dir = results.parent / "sections"
    if sections_dir.is_dir():
        parts.extend(path.read_text() for path in sorted(sections_dir.glob("*.md")))
    gpu = results.parent / "GPU.md"
    if gpu.exists():
        parts.append(gpu.read_text())
    else:
        parts.append(
            "## GPU\n\nItem 2 on a GPU has not run yet (the first GPU run, in its own section above, "
            "had 30 minutes of device time for everything). On a CUDA "
            "machine, `python benchmarks/gpu.py` runs item 2 with `gpt2-124m` (sequence length 1024) "
            "and `llama-1b` (defaults against autotune's pick: tokens/s, MFU, peak memory, trials and "
            "wall time to the best) and writes `benchmarks/GPU.md`, which the next `make bench` "
            "includes here.\n"
        )
    out.write_text("\n".join(parts).rstrip() + "\n")
    return out


def _machine(data: dict[str, Any]) -> str:
    m = data["machine"]
    device = m.get("gpu") or f"{m['cpu']}, {m['cores']} threads"
    return (
        f"*Measured {m['date']} on {device}; Python {m['python']}, torch {m['torch']}, "
        f"transformers {m['transformers']}, optuna {m['optuna']}; autotune commit {m['commit']}.*\n"
    )


def _replay(data: dict[str, Any] | None, claims: list[str]) -> str:
    if data is None:
        return ""
    cap = data["max_trials"]
    lines = [
        "## 1. Search cost on a replayed grid\n",
        _machine(data),
        "Command: `python benchmarks/bench.py --only replay` (grids: `make bench-grid`).\n",
        f"Every configuration of `benchmarks/space.yaml` was measured with the search's own trial code "
        f"(`benchmarks/data/grid-*.csv`, each configuration measured in shuffled passes). Each strategy "
        f"is then replayed {data['seeds']} times (seeds) against the table: a trial draws one of the "
        f"configuration's measured repeats, so strategies see real noise; a configuration whose peak is "
        f"over the cap, or that failed, is infeasible. The pick after n trials is the best *observed* "
        f"feasible configuration (`autotune+finalists`: the winner of its best three re-measured three "
        f"times each, as a search does before it answers; those 9 re-measurements are not counted as "
        f"trials), scored by its median over the repeats; regret is how far that is below the grid's "
        f"optimum. Only trials that trained count: autotune's skipped (predicted out of memory, "
        f"estimate over the cap) and reused (duplicate) proposals cost no training and are not trials. "
        f'A strategy that never got within 3% in {cap} trials counts as {cap + 1} (">{cap}"). '
        f"How the cached grids were measured: `benchmarks/data/NOTES.md`.\n",
    ]
    for model, workload in data["workloads"].items():
        for cap_name in ("none", "third"):
            case = workload[cap_name]
            cap_text = "no memory cap" if case["cap_bytes"] is None else f"cap {_mib(case['cap_bytes'])}"
            lines.append(
                f"### {model}, {cap_text} ({case['infeasible']} of {workload['configs']} configurations "
                f"infeasible)\n\nOptimum: {_k(case['optimum_tokens_per_s'])} tok/s with "
                f"`{case['optimum_config']}`; configurations within 3% of it: "
                f"{case['within_3pct_configs']}.{_table_noise(model, case['cap_bytes'])}\n"
            )
            lines.append(
                "| strategy | trials to within 3%: median | p90 | never | trials to within 10%: median "
                "| p90 | mean regret @10 | @20 | @40 |"
            )
            lines.append("|---|---|---|---|---|---|---|---|---|")
            rows = case["strategies"]
            for name, row in rows.items():
                regret = row["mean_regret"]
                cells = [
                    name,
                    _trials(row["median_trials_to_within"], cap),
                    _trials(row["p90_trials_to_within"], cap),
                    f"{row['never_within']}/{data['seeds']}",
                    _trials(row["median_trials_to_within_loose"], cap),
                    _trials(row["p90_trials_to_within_loose"], cap),
                    *(_pct(regret[n]) for n in REGRET_AT),
                ]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
            claims.append(_replay_claim(f"{model}, {cap_text}", rows, cap))
    low, high = DEEPSPEED_TRIALS
    lines.append(
        f"Reference (not measured here): DeepSpeed's autotuner reports {low} to {high} experiments per "
        "model on its Hugging Face examples.\n"
    )
    return "\n".join(lines)


def _table_noise(model: str, cap_bytes: int | None) -> str:
    """What the grid's own repeats say about the 3% goal (computed from the committed table)."""
    from replay import load_table

    try:
        noise = load_table(model).noise(cap_bytes)
    except (OSError, SystemExit):
        return ""
    return (
        f" The table's own noise: one window of a configuration spreads by "
        f"{100 * noise['window_spread']:.1f}% (relative standard deviation, robust to a disturbed "
        f"repeat), so a "
        f"configuration's figure, from its {noise['repeats']:g} repeats, is known to about "
        f"±{100 * noise['figure_error']:.1f}% (standard error), more than the 3% band; "
        f"{noise['plausible_within']} configurations cannot be told apart from that band at 95%. "
        f'Which of them is "within 3%" is the table\'s noise: trials to within 3% are not a measure '
        f"of the strategy here, and the goal of at most 12 cannot be judged on this table."
    )


def _replay_claim(label: str, rows: dict[str, Any], cap: int) -> str:
    ours, rnd, tpe = rows["autotune+finalists"], rows["random"], rows["tpe"]
    text = (
        f"Replay, {label}: autotune's answer is within 3% of the grid optimum after "
        f"{_trials(ours['median_trials_to_within'], cap)} trials (median; p90 "
        f"{_trials(ours['p90_trials_to_within'], cap)}; within 10%: "
        f"{_trials(ours['median_trials_to_within_loose'], cap)}), against "
        f"{_trials(rnd['median_trials_to_within'], cap)} for random search and "
        f"{_trials(tpe['median_trials_to_within'], cap)} for plain TPE. "
    )
    worse = [n for n in REGRET_AT if ours["mean_regret"][n] > rnd["mean_regret"][n]]
    behind_tpe = [n for n in REGRET_AT if ours["mean_regret"][n] > tpe["mean_regret"][n]]
    if behind_tpe:
        text += (
            "Plain TPE has the lower mean regret at "
            + ", ".join(
                f"{n} trials ({_pct(tpe['mean_regret'][n])} vs {_pct(ours['mean_regret'][n])})"
                for n in behind_tpe
            )
            + ". "
        )
    if not worse:
        return text + "Its mean regret is below random search's at 10, 20 and 40 trials."
    startup = (
        " Its first 10 trials are TPE's random start-up (optuna's default), so at 10 trials it is random "
        "search and the gap is the seeds' luck."
        if worse == [10]
        else ""
    )
    return (
        text
        + "Its mean regret is NOT below random search's at "
        + ", ".join(
            f"{n} trials ({_pct(ours['mean_regret'][n])} vs {_pct(rnd['mean_regret'][n])})" for n in worse
        )
        + "."
        + startup
    )


def _superseded(quality: dict[str, Any]) -> list[str]:
    """A warning on results measured against the old baseline (``adamw_torch``, where
    `TrainingArguments()` picks ``adamw_torch_fused`` with torch 2.13 and transformers 5.23)."""
    presets = quality.get("presets") or {}
    runs = presets.values() if isinstance(presets, dict) else presets  # by model (bench.py) or a list
    defaults = [((run.get("contenders") or {}).get("defaults") or {}).get("params") or {} for run in runs]
    if not any(d.get("optim") == "adamw_torch" for d in defaults):
        return []
    return [
        "**Superseded.** These runs measured their `defaults` with `adamw_torch`, which is not what "
        "`TrainingArguments()` gives with torch 2.13 and transformers 5.23 (`adamw_torch_fused`), "
        "before screening, the compile cache and the batch ladder: see *End to end with the batch "
        "ladder* below for the same comparison against the real defaults.\n"
    ]


def _quality(data: dict[str, Any] | None, claims: list[str]) -> str:
    if data is None:
        return ""
    lines = [
        "## 2. Quality of the answer, end to end\n",
        _machine(data),
        *_superseded(data),
        "Command: `python benchmarks/bench.py --only quality`.\n",
        "A real search over `benchmarks/space.yaml` with a fixed trial budget, then, in the same "
        "process, every contender measured again in interleaved rounds (A B C D A B C D ...). "
        "`defaults` is `TrainingArguments()` as it comes (batch 8, fp32, AdamW, the model's default "
        "attention); `auto_find_batch_size` is what `auto_find_batch_size=True` trains at when started "
        "from a batch of 64 (it halves only on an out-of-memory error); `grid_best` is the exhaustive "
        "grid's best from item 1 (none for presets without a grid). Spread: min-max over the rounds.\n",
    ]
    for model, run in data["presets"].items():
        lines.append(
            f"### {model}: {run['cost']['trained_trials']} trials, search {run['search_wall_s']:.0f} s, "
            f"best found at trial {run['trials_to_best']}\n"
        )
        lines.append("| contender | median tok/s | min-max | x defaults | configuration |")
        lines.append("|---|---|---|---|---|")
        for name, row in run["contenders"].items():
            ratio = row["over_defaults"]
            lines.append(
                f"| {name} | {_k(row['median_tokens_per_s'])} | {_k(row['min_tokens_per_s'])}-"
                f"{_k(row['max_tokens_per_s'])} | {'-' if ratio is None else f'{ratio:.2f}x'} | "
                f"`{describe_params(row['params'])}` |"
            )
        lines.append(f"\nThe search's verdict: {run['verdict'] or '-'}\n")
        rows = run["contenders"]
        ours = rows["autotune"]["median_tokens_per_s"] or 0.0
        text = (
            f"End to end, {model}: autotune's pick runs at "
            f"{rows['autotune']['over_defaults']:.2f}x the defaults"
        )
        auto = rows["auto_find_batch_size"]["median_tokens_per_s"]
        if auto:
            text += f" and {ours / auto:.2f}x auto_find_batch_size"
        if "grid_best" in rows and rows["grid_best"]["median_tokens_per_s"]:
            share = ours / rows["grid_best"]["median_tokens_per_s"]
            text += f"; it reaches {100 * share:.0f}% of the exhaustive grid's best"
        text += f" after {run['cost']['trained_trials']} trials."
        if auto and auto > ours:
            text += " auto_find_batch_size's larger batch is FASTER here: the space's batch sizes stop at 32."
        if not _superseded(data):  # a claim against the old baseline is not one to make
            claims.append(text)
    return "\n".join(lines)


def _cost(data: dict[str, Any] | None, quality: dict[str, Any] | None) -> str:
    if data is None:
        return ""
    lines = [
        "## 3. Cost of the search itself\n",
        _machine(data),
        *(_superseded(quality) if quality is not None else []),
        "Command: `python benchmarks/bench.py --only quality,cost` (the breakdown is of item 2's "
        "searches).\n",
    ]
    if quality is not None:
        lines.append(
            "| preset | total | baseline | window | warm-up | compile | set-up | skipped trials | "
            "between trials | finalists | window share |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for model, run in quality["presets"].items():
            c = run["cost"]
            share = c["trials_window_s"] / c["total_s"]
            phases = (
                "baseline_s",
                "trials_window_s",
                "trials_warmup_s",
                "trials_compile_s",
                "trials_setup_s",
            )
            cells = [f"{c['total_s']:.0f} s", *(f"{c[p]:.1f} s" for p in phases)]
            cells += [
                f"{c['skipped_trials_s']:.1f} s ({c['skipped_trials']})",
                f"{c['between_trials_s']:.1f} s",
                f"{c['finalists_s']:.1f} s",
                f"{100 * share:.0f}%",
            ]
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
        lines.append(
            "\n*window*: the measured steps of trained trials; *warm-up*: warm-up at steady-state speed; "
            "*compile*: warm-up time above steady state (torch.compile, allocator growth); *set-up*: "
            "model build, Trainer and accelerator set-up, the memory estimate's probes and memory release; "
            "*between trials*: sampling, storage and study bookkeeping; *finalists*: interleaved "
            "re-measurement of the best three and the baseline.\n"
        )
    start = data["process_start"]
    freeze = data["heap_freeze"]
    lines.append(
        f"Process start: `autotune --help` answers in {start['cli_help_s']:.2f} s; importing the trial "
        f"machinery (`import autotune.trial.trainer`: torch, transformers, accelerate) takes "
        f"{start['import_trainer_s']:.2f} s.\n"
    )
    lines.append(
        "Waste found and removed: every trial freed memory with several full `gc.collect()` calls "
        "(accelerate's `release_memory` and `free_memory`, the memory meter), each walking the ~400k "
        "objects torch and transformers keep alive. A search now freezes the heap it starts with "
        f"(`gc.freeze`). Set-up per measurement (tiny-gpt2, median of 5): "
        f"{freeze['unfrozen_setup_s']:.2f} s without the freeze, {freeze['frozen_setup_s']:.2f} s with it. "
        "Already absent: checkpoint saving, evaluation and logging are off in every trial "
        "(`save_strategy`, `eval_strategy`, `logging_strategy` = `no`); the dataset is built once per "
        "search, not per trial.\n"
    )
    return "\n".join(lines)


def _noise(data: dict[str, Any] | None, claims: list[str]) -> str:
    if data is None:
        return ""
    lines = [
        "## 4. Measurement noise\n",
        _machine(data),
        "Command: `python benchmarks/bench.py --only noise`.\n",
        "Each configuration measured repeatedly, interleaved with the others, once with the search's "
        "adaptive window (ends when the 95% CI half-width is under 3%, 5 to 30 steps) and once with a "
        "fixed 5-step window. Memory: the peak RSS, and its growth during the trial.\n",
        "| window | configuration | n | median tok/s | CV tok/s | CV peak | CV growth | mean window |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for window, rows in data["repeats"].items():
        for name, row in rows.items():
            lines.append(
                f"| {window} | {name} | {row['n']} | {_k(row['median_tokens_per_s'])} | "
                f"{_pct(row['cv_tokens_per_s'])} | {_pct(row['cv_peak_memory'])} | "
                f"{_pct(row['cv_trial_memory_growth'])} | {_seconds(row['mean_window_s'])} |"
            )
    s = data["searches"]
    lines.append(
        f"\nRepeated searches: the same complete search over `benchmarks/stability.yaml` run "
        f"{s['searches']} times from scratch (every configuration measured in each, so only noise can "
        f"change the answer). Winner after the finalists' interleaved re-measurement "
        f"({s.get('finalist_rounds', 3)} rounds): "
        + ", ".join(f"`{k}` {v}x" for k, v in s["winners"].items())
        + ". Best single window (no re-measurement): "
        + ", ".join(f"`{k}` {v}x" for k, v in s["single_window_winners"].items())
        + f". The runner-up measured {_pct(s['runner_up_slower_by'])} slower than the top "
        "configuration (median of the finalists' re-measurements).\n"
    )
    gap = s["runner_up_slower_by"]
    claims.append(
        f"Stability: the same winner in {s['same_winner']} of {s['searches']} repeated searches "
        f"(single windows alone: {s['same_single_window_winner']} of {s['searches']}); the runner-up "
        f"was {_pct(gap)} slower"
        + ("." if s["same_winner"] >= 0.9 * s["searches"] else " - BELOW the 9 of 10 target.")
    )
    adaptive, fixed = data["repeats"]["adaptive"], data["repeats"]["fixed_5_steps"]
    worst = max((r["cv_tokens_per_s"] or 0.0) for r in adaptive.values())
    mean_adaptive = sum((r["cv_tokens_per_s"] or 0.0) for r in adaptive.values()) / len(adaptive)
    mean_fixed = sum((r["cv_tokens_per_s"] or 0.0) for r in fixed.values()) / len(fixed)
    text = (
        f"Noise: one adaptive-window measurement varies by up to {_pct(worst)} (CV of tokens/s over "
        f"repeats; mean {_pct(mean_adaptive)}, against {_pct(mean_fixed)} with a fixed 5-step window). "
    )
    if mean_adaptive >= mean_fixed:
        text += (
            "The longer adaptive window does NOT reduce it: the spread is between measurements (each a "
            "fresh model and Trainer), not within a window, so only re-measurement narrows it."
        )
    else:
        text += "The adaptive window narrows it."
    claims.append(text)
    return "\n".join(lines)


def _spread(summary: dict[str, Any], fmt: Any) -> str:
    """``median (min-max)`` of a `isolation.summarize` result, each figure through `fmt`."""
    if not summary or summary.get("median") is None:
        return "-"
    return f"{fmt(summary['median'])} ({fmt(summary['min'])}-{fmt(summary['max'])})"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.0f} ms"


ISOLATION_BUDGET = 0.15  # issue 10: isolated `make run` at most 15% slower than in-process


def _isolation(data: dict[str, Any] | None, claims: list[str]) -> str:
    if data is None:
        return ""
    lines = [
        "## 5. Trials in their own process: what isolation changes and costs\n",
        _machine(data),
        "Command: `python benchmarks/bench.py --only isolation` (`make bench-isolation`).\n",
        "Load caveat: the machine has 2 cores shared with other agents running tests at the same time, "
        "so single figures are noisy; every comparison is interleaved and given as median (min-max).\n",
    ]
    if data.get("paired"):
        lines += [
            f"### Same configurations in-process and isolated ({data['space']} space)\n",
            "Each configuration measured in this process (the in-process trial code, `--isolation none`) "
            "and in a fresh worker (the supervisor's own `measure`, as for the baseline and finalists), "
            "interleaved A(in) A(iso) B(in) B(iso) ... . *Peak*: the process's VmHWM during the trial "
            "(reset at its start); *growth*: peak minus the process's RSS when the trial began.\n",
            "| preset | seq | configuration | mode | n | tok/s | peak | growth |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for model, run in data["paired"].items():
            for name, row in run["configs"].items():
                for mode, label in (("in", "in-process"), ("iso", "isolated")):
                    cell = row[mode]
                    seq = run["seq_len"] or "preset"
                    lines.append(
                        f"| {model} | {seq} | {name} | {label} | {cell['tokens_per_s']['n']} | "
                        f"{_spread(cell['tokens_per_s'], _k)} | {_spread(cell['peak'], _mib)} | "
                        f"{_spread(cell['growth'], _mib)} |"
                    )
    if data.get("paired"):
        claims.append(_paired_claim(data["paired"]))
    if data.get("drift"):
        lines.append(
            "\n### Drift: the 1st against a later in-process measurement\n\n"
            "In a fresh process: the configuration measured in-process first, then after other "
            "configurations of the space (as a search's later trial), and in a fresh worker before and "
            "after.\n"
        )
        lines.append("| preset | configuration | in-process, 1st | in-process, later | fresh worker |")
        lines.append("|---|---|---|---|---|")
        for model, drift in data["drift"].items():
            iso = ", ".join(_mib(p) for p in drift["iso_peaks"])
            lines.append(
                f"| {model} | `{describe_params(drift['params'])}` | {_mib(drift['in_first_peak'])} | "
                f"{_mib(drift['in_later_peak'])} (measurement {drift['in_later_position']}) | {iso} |"
            )
    extra: float | None = None
    if data.get("worker_phases") and data.get("forkserver"):
        forks = data["forkserver"]
        first = sorted(f["first_worker_running_s"] for f in forks)
        children = sorted(c for f in forks for c in f["children_s"][1:])
        phases = data["worker_phases"]
        lines.append(
            "\n### Start cost\n\n"
            f"The forkserver's own start (once per search; the CLI starts it before planning, so part of it "
            f"overlaps): from `start_forkserver()` to the first worker running, in a fresh process, "
            f"{_spread(_summary(first), _seconds)} over {len(first)} processes. Later workers run "
            f"{_spread(_summary(children), _ms)} after they are asked for (a trivial job).\n"
        )
        lines.append(
            "Per worker, during the measurements above (timestamps on the shared monotonic clock; "
            "`benchmarks/_timed_worker.py`):\n"
        )
        lines.append("| phase | what | median (min-max) |")
        lines.append("|---|---|---|")
        what = {
            "start": "asked for -> the worker's code running (forkserver fork, unpickling the job)",
            "prepare": "process group, parent watch, environment, log file",
            "plan": "the plan from the stored study (`plan_from_study`)",
            "trainer": "the trial `Trainer` built (`build_trainer`)",
            "measure": "the measurement (model build, warm-up, window, release)",
            "teardown": "scratch folder, heap unfreeze, result sent",
            "exit": "the worker's exit seen and joined by the supervisor",
            "wall": "asked for -> result in the supervisor",
        }
        for name, summary in phases.items():
            lines.append(f"| {name} | {what.get(name, '')} | {_spread(summary, _ms)} |")
        extra = sum(phases[n]["median"] or 0.0 for n in phases if n not in ("measure", "wall"))
        lines.append(f"\nIsolation's own cost per worker (every phase but the measurement): {_ms(extra)}.\n")
        inside = _inside_measurement(data["paired"])
        lines.append(
            "Inside the measurement, a fresh process may pay first-use costs a long-lived one paid once "
            "(kernel and allocator set-up): over the paired measurements above, *set-up* (model build, "
            "Trainer and accelerator set-up, memory release: the measurement minus warm-up and window) "
            f"took {_spread(inside['in']['setup'], _seconds)} in-process and "
            f"{_spread(inside['iso']['setup'], _seconds)} in a worker; *warm-up* "
            f"{_spread(inside['in']['warmup'], _seconds)} and {_spread(inside['iso']['warmup'], _seconds)}.\n"
        )
    if data.get("make_run"):
        run = data["make_run"]
        met = run["overhead"] <= ISOLATION_BUDGET
        lines.append(
            f"### `make run`: wall time\n\n`{run['command']}` on a fresh SQLite store, "
            f"`--isolation process` and `--isolation none` interleaved, {run['runs']} runs each"
            + (
                f" (measured {run['machine']['date']}, commit {run['machine']['commit']})"
                if run.get("machine")
                else ""
            )
            + ":\n"
        )
        lines.append("| isolation | median | min-max | runs (s) |")
        lines.append("|---|---|---|---|")
        for mode in ("process", "none"):
            walls = ", ".join(f"{w:.0f}" for w in run["walls_s"][mode])
            lines.append(
                f"| {mode} | {_seconds(run[mode]['median'])} | {_seconds(run[mode]['min'])}-"
                f"{_seconds(run[mode]['max'])} | {walls} |"
            )
        loaded = data.get("make_run_loaded")
        if loaded:
            lines.append(
                f"\nAn earlier pass of the same {loaded['runs']} + {loaded['runs']} runs, while other "
                "agents' tests kept the load average at 4-5 on the 2 cores: process "
                + ", ".join(f"{w:.0f}" for w in loaded["walls_s"]["process"])
                + " s; none "
                + ", ".join(f"{w:.0f}" for w in loaded["walls_s"]["none"])
                + " s. Under such load the wall time measures the neighbours, not isolation.\n"
            )
        verdict = "met" if met else "NOT met"
        fastest = run["process"]["min"] / run["none"]["min"] - 1
        overlap = run["process"]["min"] <= run["none"]["max"] and run["none"]["min"] <= run["process"]["max"]
        lines.append(
            f"\nFastest run of each (the least disturbed): {100 * fastest:+.1f}%."
            + (
                " The two modes' ranges overlap: under this load the medians below cannot settle the "
                "budget either way; the per-worker costs above are the steadier figure."
                if overlap
                else ""
            )
        )
        lines.append(
            f"\nIsolated over in-process: {100 * run['overhead']:+.1f}% (medians), forkserver start "
            "included. "
            f"The issue's budget (at most {100 * ISOLATION_BUDGET:.0f}% more) is **{verdict}**.\n"
        )
        claims.append(
            f"Isolation: `make run` takes {_seconds(run['process']['median'])} with a fresh worker per "
            f"trial against {_seconds(run['none']['median'])} in one process "
            f"({100 * run['overhead']:+.1f}%, medians of {run['runs']}); the 15% budget is {verdict}."
            + (f" A worker costs {_ms(extra)} beyond its measurement." if extra is not None else "")
        )
    if data.get("estimate"):
        est = data["estimate"]
        lines.append(
            "### The memory estimate in a fresh process\n\n"
            "Every trial asks for autotune's memory estimate before it trains; its probe (a forward and "
            "backward at batch 2, per kind of attention, precision and checkpointing) is cached for the "
            "life of the process. In fresh processes (median (min-max) of 3, the forkserver's preload "
            f"imported): the first estimate {_spread(est['cold'], _seconds)}, the same kind again "
            f"{_spread(est['same_kind'], _seconds)}, a new kind afterwards "
            f"{_spread(est['new_kind'], _seconds)}. A worker measures one trial, so every isolated "
            "trial pays the first figure; in one process only the first trial does, and a new kind "
            "costs the third"
            + (
                ": the difference is the process's first forward and backward (kernel and allocator "
                "first use), not the probe's own work.\n"
                if est["cold"]["median"] > 2 * est["new_kind"]["median"]
                else ".\n"
            )
        )
    if data.get("profile"):
        profile = data["profile"]
        lines.append(
            "### Where a worker's time goes (cProfile of one worker measuring the defaults)\n\n"
            f"Worker wall {_seconds(profile['phases']['wall'])}, of which the measurement "
            f"{_seconds(profile['phases'].get('measure'))}. Largest cumulative times:\n"
        )
        lines.append("| function | calls | cumulative |")
        lines.append("|---|---|---|")
        for row in profile["top"]:
            lines.append(f"| `{row['function']}` | {row['calls']} | {_seconds(row['cumulative_s'])} |")
        lines.append("")
    lines.append("")
    return "\n".join(lines)


def _paired_claim(paired: dict[str, Any]) -> str:
    """Isolated against in-process, per preset and configuration: tok/s ratio and peak difference."""
    parts = []
    larger_growth = True
    for model, run in paired.items():
        for name, row in run["configs"].items():
            tin, tiso = row["in"]["tokens_per_s"]["median"], row["iso"]["tokens_per_s"]["median"]
            pin, piso = row["in"]["peak"]["median"], row["iso"]["peak"]["median"]
            if not (tin and tiso and pin and piso):
                continue
            parts.append(f"{model} {name} {tiso / tin:.2f}x tok/s, peak {(piso - pin) / 2**20:+.0f} MiB")
            growth_in, growth_iso = row["in"]["growth"]["median"], row["iso"]["growth"]["median"]
            larger_growth = larger_growth and bool(growth_in and growth_iso and growth_iso > growth_in)
    return (
        "Isolated against in-process, the same configurations interleaved (medians): "
        + "; ".join(parts)
        + ". A worker's peak leaves out what the search's own process holds"
        + (
            "; its trial's growth over its starting RSS is larger, since a fresh process's heap has not "
            "grown yet."
            if larger_growth
            else "."
        )
    )


def _inside_measurement(paired: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Set-up and warm-up seconds of every paired measurement, per mode (median, min, max)."""
    setup: dict[str, list[float]] = {"in": [], "iso": []}
    warmup: dict[str, list[float]] = {"in": [], "iso": []}
    for run in paired.values():
        for row in run["configs"].values():
            for record in row["raw"].get("in", []):
                if record.get("tokens_per_s") and "warmup_s" in record:
                    setup["in"].append(record["setup_s"])
                    warmup["in"].append(record["warmup_s"])
            for record in row["raw"].get("iso", []):
                measure = record.get("phases", {}).get("measure")
                if record.get("tokens_per_s") and measure is not None:
                    setup["iso"].append(measure - record["warmup_s"] - record["window_s"])
                    warmup["iso"].append(record["warmup_s"])
    return {
        mode: {"setup": _summary(setup[mode]), "warmup": _summary(warmup[mode])} for mode in ("in", "iso")
    }


def _summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _bf16_note(data: dict[str, Any]) -> str:
    """Whether the screening benchmark's CPU has native bf16, and whether bf16 was slowed."""
    bf16 = "native bf16" if data["machine"].get("native_bf16") else "no native bf16: bf16 is emulated"
    if data.get("simulated_slow_bf16"):
        bf16 += (
            ", so the benchmark slowed bf16 steps itself (`benchmarks/slow_bf16.py`: a sleep after each "
            "forward of nine times the step it belongs to), as bf16 runs on a CPU without it"
        )
    return f"The CPU has {bf16}.\n"


def _screening(data: dict[str, Any] | None, claims: list[str]) -> str:
    """Item 6 (`benchmarks/screening.py`): the same search with screening off and on."""
    if data is None:
        return ""
    runs = data["runs"]
    lines = [
        "## 6. Screening: a space where some configurations are far slower\n",
        _machine(data) + _bf16_note(data),
        "Command: `python benchmarks/screening.py"
        + _before_flag(runs)
        + "` (the same 12-trial search, `"
        + " ".join(data["args"])
        + "`, baseline and finalists included, over batch 4-32 x fp32/bf16 x eager/sdpa; screening "
        "off (`--screen-ratio 0`) and on (0.5), interleaved, after the code the issue was written on "
        "where `--before` ran it, each on a fresh store).\n",
        "| screening | run | wall time | trials stage | finalists stage | screened out | bf16 trials "
        "| winner | winner tok/s (re-measured) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(f"{_screening_row(run)} {_k(run.get('winner_median_tokens_per_s'))} |")
    off, on = _median_of(runs, "off", "wall_s"), _median_of(runs, "on", "wall_s")
    search_off, search_on = _median_of(runs, "off", "search_s"), _median_of(runs, "on", "search_s")
    picks = sorted({describe_params(r["winner"]) for r in runs if r.get("winner") and "code" not in r})
    verdict = "the same pick in every run"
    if len(picks) > 1:
        verdict = f"{len(picks)} different picks ({'; '.join(picks)})"
        if all("either is as good" in (r.get("verdict") or "") for r in runs if "code" not in r):
            verdict += ", each run's re-measurement calling its winner and runner-up a tie"
    lines.append("")
    lines.append(
        f"Median wall time: {off:.0f} s without screening, {on:.0f} s with it ({on / off:.2f}x); {verdict}. "
        f"{_against_today(runs, on)}The trials themselves took "
        f"{search_on:.0f} s instead of {search_off:.0f} s ({search_on / search_off:.2f}x); the finalists' "
        "re-measurement and the fixed costs (forkserver, baseline, set-up) are what screening leaves."
    )
    outside = statistics.median(r["wall_s"] - _stage(r, "search_s") for r in _arm(runs, "on"))
    lines.append(
        f"What screening cannot touch (all but the trials stage: start-up, baseline, finalists) took "
        f"{outside:.0f} s of each screened run (median), {outside / off:.0%} of the unscreened wall time: "
        f"a third of it would leave {max(0.0, off / 3 - outside):.0f} s for 12 trials, the fastest "
        "configurations' full windows included."
    )
    claims.append(
        f"Screening: a 12-trial search over a space where bf16 runs far slower takes {on:.0f} s "
        f"instead of {off:.0f} s ({on / off:.2f}x, median){_today_took(runs)}; {verdict}."
    )
    return "\n".join(lines) + "\n"


def _screening_heldout(data: dict[str, Any] | None, claims: list[str]) -> str:
    """`benchmarks/screening.py --scenario heldout`: the issue's held-out search, screening off and on,
    and its picks re-measured as a user does."""
    if data is None:
        return ""
    runs = data["runs"]
    lines = [
        "## 6b. Screening on the issue's held-out search\n",
        _machine(data) + _bf16_note(data),
        "Command: `python benchmarks/screening.py --scenario heldout"
        + _before_flag(runs)
        + "`: the search of the issue's held-out "
        f"test as its user ran it, a Qwen2-style model of {data.get('model_parameters', 0) / 1e6:.1f}M "
        "parameters from a local folder (random weights), `"
        + " ".join(data["args"])
        + "`, default windows, over batch 8-64 x fp32/bf16 x AdamW plain/fused x eager/sdpa (32 "
        "configurations); screening off and on (and the code the issue was written on, with `--before`), "
        "each on a fresh store.\n",
        "| screening | run | wall time | trials stage | finalists stage | screened out | bf16 trials "
        "| time in bf16 trials | winner | the answer's speedup over the defaults |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(f"{_screening_row(run, run.get('bf16_trials_s', 0))} {_interval(run.get('speedup'))} |")
    off, on = _median_of(runs, "off", "wall_s"), _median_of(runs, "on", "wall_s")
    lines.append("")
    lines.append(
        f"Wall time: {off:.0f} s without screening, {on:.0f} s with it ({on / off:.2f}x). "
        + _against_today(runs, on).strip()
    )
    for run in runs:
        if run.get("verdict"):
            lines.append(f"\nThe answer, {_arm_label(run)}: {run['verdict']}")
    user = data.get("user_runs")
    if user:
        lines += [
            "",
            f"Re-measured as a user does (`fresh_contenders.user_run`: each configuration trained in a fresh "
            f"process by a plain `Trainer`, {user['seconds']:.0f} s of steady window, {user['rounds']} "
            "rotated rounds); the speedup is the geometric mean of the per-round ratios with its 95% t "
            "interval:\n",
            "| configuration | tok/s, median (per round) | over the defaults |",
            "|---|---|---|",
        ]
        for name, row in user["contenders"].items():
            rounds = ", ".join(_k(v) for v in row["tokens_per_s"])
            shown = "`TrainingArguments()` defaults" if name == "defaults" else name
            median = _k(row["median_tokens_per_s"])
            lines.append(f"| {shown} | {median} ({rounds}) | {_interval(row['over_defaults'])} |")
            if row["over_defaults"]:
                by = " and ".join(
                    _arm_label(r) for r in runs if r.get("winner") and describe_params(r["winner"]) == name
                )
                claims.append(
                    f"The issue's held-out search (12 trials), {by or 'a run'}: its pick {name} against the "
                    f"defaults as a user re-measures it: {_interval(row['over_defaults'])}, "
                    f"{_separation(row['over_defaults'])}."
                )
        if user.get("errors"):
            lines.append("\nRuns that gave no figure: " + "; ".join(user["errors"]))
    claims.append(
        f"Screening on the issue's held-out search: {on:.0f} s instead of {off:.0f} s "
        f"({on / off:.2f}x){_today_took(runs)}."
    )
    return "\n".join(lines) + "\n"


def _screening_row(run: dict[str, Any], bf16_s: float | None = None) -> str:
    """A screening run's row up to its winner (with `bf16_s`, the seconds its bf16 trials took),
    ending in ``|`` for the caller's last column."""
    label = _arm_label(run).removeprefix("screening ")
    winner = describe_params(run["winner"]) if run.get("winner") else "-"
    bf16 = "" if bf16_s is None else f" {bf16_s:.0f} s |"
    stages = [
        f"{_stage(run, name):.0f} s" if run.get("time_breakdown") else "-"
        for name in ("search_s", "finalists_s")
    ]
    return (
        f"| {label} | {run['repeat'] + 1} | {run['wall_s']:.0f} s | {stages[0]} "
        f"| {stages[1]} | {run['screened_out']} | {run['bf16_trials']} |{bf16} "
        f"{winner} |"
    )


def _arm(runs: list[dict[str, Any]], arm: str) -> list[dict[str, Any]]:
    """The runs of one arm: ``before`` (an earlier commit's code, `screening.py --before`), ``off``
    or ``on`` (this code, screening off or on)."""
    if arm == "before":
        return [r for r in runs if "code" in r]
    return [r for r in runs if "code" not in r and bool(r["screen_ratio"]) == (arm == "on")]


def _before_flag(runs: list[dict[str, Any]]) -> str:
    """The ``--before`` option of the command that ran `runs` (empty when it was not given)."""
    return "".join(f" --before {code}" for code in sorted({r["code"] for r in _arm(runs, "before")}))


def _arm_label(run: dict[str, Any]) -> str:
    if "code" in run:
        return f"today's code ({run['code']}, no screening)"
    return "screening off" if not run["screen_ratio"] else f"screening on ({run['screen_ratio']:g})"


def _median_of(runs: list[dict[str, Any]], arm: str, what: str) -> float:
    """The median wall time (``wall_s``) or stage seconds of an arm's runs."""
    values = [r["wall_s"] if what == "wall_s" else _stage(r, what) for r in _arm(runs, arm)]
    return statistics.median(values)


def _against_today(runs: list[dict[str, Any]], on: float) -> str:
    """The issue's goal, judged against today's search (the code it was written on) where the
    benchmark ran it (``--before``); a sentence ending in a space, or empty."""
    before = _arm(runs, "before")
    if not before:
        return "(The code the issue was written on was not run here: `--before`.) "
    today = _median_of(runs, "before", "wall_s")
    goal = "met" if on <= today / 3 else "NOT met"
    picks = sorted({describe_params(r["winner"]) for r in before if r.get("winner")})
    return (
        f"Today's search, the code of {before[0]['code']} (`--before`: no screening), took "
        f"{today:.0f} s: with screening the same search now takes "
        f"{on / today:.2f}x of it (the issue's goal of at most a third of today's is {goal}); today's "
        f"pick: {'; '.join(picks) or '-'}. "
    )


def _today_took(runs: list[dict[str, Any]]) -> str:
    """``; today's code took N s`` for a claim, where the benchmark ran it (``--before``)."""
    return f"; today's code took {_median_of(runs, 'before', 'wall_s'):.0f} s" if _arm(runs, "before") else ""


def _stage(run: dict[str, Any], name: str) -> float:
    return float(((run.get("time_breakdown") or {}).get("stages") or {}).get(name) or 0.0)


def _memory_estimate(data: dict[str, Any] | None, claims: list[str]) -> str:
    """`benchmarks/memory_estimate.py`: each trial's estimate against its measured peak, from the
    eager probe alone and from the measured peaks of earlier trials of its kind."""
    if data is None:
        return ""
    lines = [
        "## 7b. Memory estimates from the trials' measured peaks\n",
        _machine(data),
        f"Command: `python benchmarks/memory_estimate.py --trials {data['trials']}`: per preset one real "
        f"{data['trials']}-trial search (sequence length {data['seq_len']}, no baseline or finalists) over "
        "batch 4-32 x `torch_compile` off/inductor x activation checkpointing off/on (sdpa). The probe "
        "measures one eager forward and backward per kind; a trial of a kind (compile backend "
        "included) that an earlier trial measured is estimated from those trials' peaks, and stores "
        "the probe's figure beside it, so both are compared with the same measured peak. Errors are "
        "|estimate - peak| / peak.\n",
        "| preset | trained trials | estimated from peaks | their error, from peaks: mean (worst) "
        "| the same trials' error, probe alone: mean (worst) | every trial, as estimated: mean (worst) "
        "| every trial, probe alone: mean (worst) |",
        "|---|---|---|---|---|---|---|",
    ]

    def cell(spread: dict[str, float] | None) -> str:
        if not spread:
            return "-"
        return f"{100 * spread['mean_abs']:.0f}% ({100 * spread['worst_abs']:.0f}%)"

    for run in data["runs"]:
        summary = run["summary"]
        lines.append(
            f"| {run['preset']} | {summary['trials']} | {summary['from_peaks']} "
            f"| {cell(summary['from_peaks_error'])} | {cell(summary['from_peaks_probe_error'])} "
            f"| {cell(summary['all_used_error'])} | {cell(summary['all_probe_error'])} |"
        )
        better, probe = summary["from_peaks_error"], summary["from_peaks_probe_error"]
        if better and probe:
            claims.append(
                f"Memory estimate ({run['preset']}, CPU): a trial of a kind the study had measured was "
                f"estimated {100 * better['mean_abs']:.0f}% off its peak on average (worst "
                f"{100 * better['worst_abs']:.0f}%), against {100 * probe['mean_abs']:.0f}% (worst "
                f"{100 * probe['worst_abs']:.0f}%) from the eager probe alone, over "
                f"{summary['from_peaks']} trials (section 7b)."
            )
    groups = [(run["preset"], run["summary"].get("by_compile") or {}) for run in data["runs"]]
    if any(groups_of for _, groups_of in groups):
        lines += [
            "",
            "The trials estimated from peaks, eager and compiled apart (signed errors: + over the peak, "
            "- under it; *child processes*: what the data-loader and compile workers of every trained "
            "trial of the group held at their largest, which its peak counts). A compiled trial's peak "
            "holds inductor's compile workers, which differ between trials of one kind by as much as "
            "that range: where a compiled trial's estimate is far over its peak, the trial it was "
            "estimated from had the larger compile workers.\n",
            "| preset | trials | n | from peaks: mean error, absolute (range) "
            "| probe alone: mean error, absolute (range) | child processes |",
            "|---|---|---|---|---|---|",
        ]

        def ranged(error: dict[str, float] | None) -> str:
            if not error:
                return "-"
            low, high = 100 * error["low"], 100 * error["high"]
            return f"{100 * error['mean_abs']:.0f}% ({low:+.0f}% to {high:+.0f}%)"

        for preset, groups_of in groups:
            for name, group in groups_of.items():
                if not group["trials"]:
                    continue
                children = group.get("children_bytes")
                held = f"{children[0] / 2**20:.0f}-{children[1] / 2**20:.0f} MiB" if children else "-"
                lines.append(
                    f"| {preset} | {name} | {group['trials']} | {ranged(group['error'])} "
                    f"| {ranged(group['probe_error'])} | {held} |"
                )
    lines.append("")
    return "\n".join(lines)


def _setup_cost(data: dict[str, Any] | None, claims: list[str]) -> str:
    """Item 7 (`benchmarks/setup_cost.py`): a fresh worker's set-up for a ~0.5B model, the first
    trial of a memory kind (which probes it) and a later one (which reads the probe from the study);
    with several repeats, medians and their range."""
    if data is None:
        return ""
    previous = data.get("previous") or {}
    before_header = f" set-up before (commit {previous['commit']}): first, later |" if previous else ""
    runs = {flag: [c for c in data["cases"] if bool(c["pretrained"]) == flag] for flag in (False, True)}
    repeats = max(len(group) for group in runs.values())
    lines = [
        "## 7. Set-up of a fresh worker for a 0.5B model\n",
        _machine(data),
        "Command: `python benchmarks/setup_cost.py`: a Qwen2-style config of Qwen2.5-0.5B's shape in a "
        "local folder, a two-trial search through the CLI (`" + " ".join(data["args"]) + "`; two "
        "configurations of one memory kind, the search's default warm-up and window). *Set-up* is what "
        "a trial records as `setup_s`: from the worker taking the job to its first optimizer step "
        "(loading the study, the Trainer, the memory estimate, the model). The *first* trial of a kind "
        "also probes it for the memory estimate (a second, zero-filled model, a forward and backward); "
        "a *later* one reads the probe's figure from the study, as every later trial of a search does. "
        "The other columns are the later trial's; its *share* is its set-up over its set-up, warm-up "
        f"and window. {_runs_phrase(repeats)}; *set-up before* is the same benchmark at that commit on "
        "this kind of machine.\n",
        "| model | parameters | set-up, first trial | set-up, later trial | first step | warm-up | window "
        f"| set-up share, first / later | search wall |{before_header}",
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if before_header else ""),
    ]

    def share(trial: dict[str, Any]) -> float:
        setup, warmup, window = (float(trial.get(k) or 0.0) for k in ("setup_s", "warmup_s", "window_s"))
        return setup / (setup + warmup + window) if setup + warmup + window else 0.0

    def figure(values: list[Any], fmt: Any = lambda v: f"{v:.1f} s") -> str:
        known = [float(v) for v in values if v is not None]
        return fmt(known[0]) if len(known) == 1 else _spread(_summary(known), fmt)  # one run: no range

    def percent(value: float) -> str:
        return f"{100 * value:.0f}%"

    for flag, cases in runs.items():
        if not cases:
            continue
        later = [c.get("later") or c for c in cases]  # runs before the second trial was measured had one
        label = "`--pretrained` (safetensors)" if flag else "random init"
        earlier = [c for c in previous.get("cases", []) if bool(c["pretrained"]) == flag]
        shares = (
            figure([share(c) for c in cases], percent),
            figure([share(t) for t in later], percent),
        )
        before = (
            f" {figure([c['setup_s'] for c in earlier])}, "
            f"{figure([c.get('later_setup_s') for c in earlier])} |"
            if earlier
            else " - |"
        )
        cells = [
            label,
            f"{cases[0]['params'] / 1e6:.0f}M",
            figure([c["setup_s"] for c in cases]),
            *(
                figure([t.get(key) for t in later])
                for key in ("setup_s", "first_step_s", "warmup_s", "window_s")
            ),
            f"{shares[0]} / {shares[1]}",
            figure([c["wall_s"] for c in cases], lambda v: f"{v:.0f} s"),
        ]
        lines.append("| " + " | ".join(cells) + " |" + (before if before_header else ""))
        claims_label = "pretrained" if flag else "random-init"
        claims.append(
            f"Set-up of a fresh worker, {cases[0]['params'] / 1e6:.0f}M-parameter model ({claims_label}): "
            f"{figure([t.get('setup_s') for t in later])}, {shares[1]} of a later trial; the first trial of "
            f"its kind, which probes it for the memory estimate: {figure([c['setup_s'] for c in cases])} "
            f"({shares[0]})."
        )
    return "\n".join(lines) + "\n"


def _runs_phrase(count: int) -> str:
    return "One run" if count == 1 else f"Medians of {count} runs, with their range"


def _own_answer(row: dict[str, Any]) -> str:
    """What the search itself told its user about its pick against its baseline (measured in fresh
    workers, paired rounds): keep the defaults, or the speedup it claimed."""
    speedup = row.get("speedup_reported")
    if speedup is None:
        return "no baseline"
    if row.get("rule") == "keep_defaults" or "nothing beat the defaults measurably" in (
        row.get("verdict") or ""
    ):
        # the answer's own speedup is the defaults' 1.0: say the best measured one's (runs recorded
        # before the answer kept the defaults reported the best one's as `speedup_reported`)
        best = row.get("best_speedup_reported", speedup)
        return (
            "keep the defaults" if best is None else f"keep the defaults ({best:.2f}x, not measurably faster)"
        )
    return f"{speedup:.2f}x over its baseline"


def _ladder_quality(data: dict[str, Any] | None, claims: list[str]) -> str:
    """`benchmarks/ladder_quality.py`: end to end against the real defaults and
    `auto_find_batch_size`, over the space whose batches go on while they fit; where the time went."""
    if data is None:
        return ""
    m = data["machine"]
    lines = [
        "## End to end with the batch ladder\n",
        f"`python benchmarks/ladder_quality.py`, {m['date']}, commit {m['commit']}: {m['cpu']}, "
        f"{m['cores']} threads, torch {m['torch']}.{_searched_at(data)} The benchmark space with its "
        "batch list ending in "
        "`fits`; a real 10-trial search per preset, then the defaults, `auto_find_batch_size` (from 64) "
        "and the pick in 3 interleaved rounds (medians, with the rounds' range).\n",
        "| preset | defaults | auto_find_batch_size | autotune's pick | pick vs defaults | "
        "pick vs auto_find | the search's own answer |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in data["presets"]:
        c = row["contenders"]

        def cell(name: str, c: dict[str, Any] = c) -> str:
            r = c[name]
            return (
                f"{r['median_tokens_per_s'] / 1000:.1f}k ({r['min_tokens_per_s'] / 1000:.1f}-"
                f"{r['max_tokens_per_s'] / 1000:.1f}k)"
            )

        pick = c["autotune"]["median_tokens_per_s"]
        vs_auto = pick / c["auto_find_batch_size"]["median_tokens_per_s"]
        batch = c["autotune"]["params"].get("per_device_train_batch_size")
        auto_batch = c["auto_find_batch_size"]["params"].get("per_device_train_batch_size")
        claims.append(
            f"End to end over the batch ladder, {row['model']}: autotune's pick (bs {batch}) runs at "
            f"{c['autotune']['over_defaults']:.2f}x `TrainingArguments()`'s defaults and {vs_auto:.2f}x "
            f"auto_find_batch_size (bs {auto_batch}), medians of 3 interleaved rounds."
        )
        lines.append(
            f"| {row['model']} | {cell('defaults')} | {cell('auto_find_batch_size')} "
            f"(bs {auto_batch}) | {cell('autotune')} (bs {batch}) | {c['autotune']['over_defaults']:.2f}x | "
            f"{vs_auto:.2f}x | {_own_answer(row)} |"
        )
    lines += [
        "",
        "The contenders are measured in one long-lived benchmark process (`harness.Bench`), the "
        "search's trials and finalists each in a fresh worker; *the search's own answer* is what the "
        "search told its user from its paired rounds against its baseline. Where the two disagree, "
        "the conditions rank configurations differently on that machine (a long-lived process that "
        "has run other configurations is not a fresh one). Which one a user's long run resembles is "
        "measured in the next section: each contender trained in its own fresh process by a plain "
        "`Trainer`, as a user re-measures it.",
        "",
        "Where each search's time went (the study's `time_breakdown`, as `autotune show` prints it: "
        "phases summed over the measured jobs, finalists' re-measurements included; *measured* is "
        "the share of the search's wall time spent in measured windows):\n",
        "| preset | search wall | set-up | compile | warm-up | windows | screened out | between | "
        "finalists stage | measured |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data["presets"]:
        tb = row.get("time_breakdown") or {}
        ph, st = tb.get("phases") or {}, tb.get("stages") or {}
        if not ph:
            continue
        lines.append(
            f"| {row['model']} | {tb['wall_s']:.0f} s | {ph['setup_s']:.1f} s | {ph['compile_s']:.1f} s | "
            f"{ph['warmup_s']:.1f} s | {ph['window_s']:.1f} s | {ph['screening_s']:.1f} s | "
            f"{ph['between_s']:.1f} s | {st.get('finalists_s', 0):.0f} s | "
            f"{100 * tb['measured_share']:.0f}% |"
        )
        claims.append(
            f"Search cost, {row['model']} (10 trials, batch ladder space): {tb['wall_s']:.0f} s, "
            f"{100 * tb['measured_share']:.0f}% of it in measured windows."
        )
    lines += _compile_weight(data["presets"])
    return "\n".join(lines) + "\n"


def _compile_weight(presets: list[dict[str, Any]]) -> list[str]:
    """What keeps the measured share low: the trials that compiled (each configuration compiles
    cold once; a reused trial, whose stored figures repeat another's, is left out), their windows,
    and the share the same search would have measured had those compiles cost nothing."""
    lines = [
        "",
        "What keeps the share low: the trials that compiled, each a configuration the study had not "
        "compiled before (a cold compile, which a user's run of it pays too), against the windows "
        "that measured them, which end once their interval is within the target (3%) or at their limit. "
        "*Without the trials' compiles* is the share the same search would have measured had those "
        "compiles cost nothing (its windows over its wall time less them), arithmetic on the figures "
        "above, not a measurement:\n",
        "| preset | measured trials | of them compiled | their compiles | their windows (median) | "
        "other trials' windows (median) | without the trials' compiles |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in presets:
        tb = row.get("time_breakdown") or {}
        ran = [t for t in row.get("trial_times") or [] if t.get("wall_s", 0) >= (t.get("compile_s") or 0)]
        ran = [t for t in ran if t.get("window_s")]
        if not tb or not ran:
            continue
        compiled = [t for t in ran if (t.get("compile_s") or 0) > 1.0]
        eager = [t for t in ran if t not in compiled]
        compile_s = math.fsum(t["compile_s"] for t in compiled)
        windows = tb["phases"]["window_s"]

        def median_window(trials: list[dict[str, Any]]) -> str:
            return f"{statistics.median(t['window_s'] for t in trials):.1f} s" if trials else "-"

        lines.append(
            f"| {row['model']} | {len(ran)} | {len(compiled)} | {compile_s:.0f} s "
            f"({compile_s / tb['wall_s']:.0%} of the wall) | {median_window(compiled)} | "
            f"{median_window(eager)} | {windows / (tb['wall_s'] - compile_s):.0%} |"
        )
    lines.append(
        "\nWhere one of those cold compiles goes (the C++ compiler's runs, and what each pays before "
        "any kernel code): *Where a cold compile goes* below."
    )
    return lines


def _fresh_contenders(data: dict[str, Any] | None, claims: list[str]) -> str:
    """`benchmarks/fresh_contenders.py`: the ladder benchmark's contenders, each trained in a fresh
    process by a plain `Trainer`, as a user re-measures them."""
    if data is None:
        return ""
    m, lm = data["machine"], data["ladder_machine"]
    lines = [
        "## End to end as a user re-measures it: fresh plain-Trainer processes\n",
        f"`python benchmarks/fresh_contenders.py --rounds {data['rounds']} --seconds {data['seconds']:.0f}`, "
        f"{m['date']}, commit {m['commit']}: {m['cpu']}, {m['cores']} threads, torch {m['torch']}. The "
        f"contenders of the batch-ladder table (searched on {lm['date']}, {lm['cpu']}), each trained in "
        "its own fresh process by a plain transformers `Trainer` (`benchmarks/user_run.py`: no autotune "
        f"code in the loop) for a steady window of {data['seconds']:.0f} s after its warm-up, the order "
        "rotated each round. Medians of the rounds; the pick's speedup is the geometric mean of the "
        "per-round ratios with its 95% t interval.\n",
        "| preset | defaults | auto_find_batch_size | autotune's pick | pick vs defaults | "
        "pick vs auto_find |",
        "|---|---|---|---|---|---|",
    ]

    interval = _interval
    for row in data["presets"]:
        c = row["contenders"]
        batch = {name: c[name]["params"].get("per_device_train_batch_size") for name in c}
        lines.append(
            f"| {row['model']} | {_k(c['defaults']['median_tokens_per_s'])} (bs {batch['defaults']}) | "
            f"{_k(c['auto_find_batch_size']['median_tokens_per_s'])} (bs {batch['auto_find_batch_size']}) | "
            f"{_k(c['autotune']['median_tokens_per_s'])} (bs {batch['autotune']}) | "
            f"{interval(row['pick_over_defaults'])} | {interval(row['pick_over_auto_find_batch_size'])} |"
        )
        for other, label in (("defaults", "the defaults"), ("auto_find_batch_size", "auto_find_batch_size")):
            s = row[f"pick_over_{other}"]
            if s is not None:
                claims.append(
                    f"As a user re-measures it (fresh plain-Trainer processes), {row['model']}: the pick "
                    f"against {label}: {interval(s)}, {_separation(s)}."
                )
    return "\n".join(lines) + "\n"


def _interval(s: dict[str, Any] | None) -> str:
    """A stored `Speedup` as ``ratio (low-high)``."""
    if s is None:
        return "-"
    return f"{s['ratio']:.2f}x ({s['low']:.2f}-{s['high']:.2f}x)"


def _separation(s: dict[str, Any]) -> str:
    if s["low"] > 1:
        return "faster"
    if s["high"] < 1:
        return "slower"
    return "not separated (the interval spans 1)"


def _searched_at(data: dict[str, Any]) -> str:
    """When the searches ran, where their picks were compared again later (``--contenders-only``)."""
    searched = data.get("search_machine")
    if not searched:
        return ""
    return (
        f" The searches ran on {searched['date']} at commit {searched['commit']}; their picks, the "
        "defaults and auto_find_batch_size were measured again then (`--contenders-only`)."
    )
