"""End to end with the batch ladder: autotune's pick against the Transformers defaults and
``auto_find_batch_size`` when the space's batches may go past 32 (the benchmarks' end-to-end
comparison, over ``benchmarks/space_ladder.yaml``: a space whose batch list ends with ``fits``).

    python -m benchmarks.ladder_quality [--model tiny-bert ...]   # 5-10 minutes per preset

Each preset: a real 10-trial search, then the defaults, ``auto_find_batch_size`` (from a batch of
64) and the search's pick measured in 3 interleaved rounds (`harness.search_and_compare`). Results go to
``benchmarks/results/ladder_quality.json``, and RESULTS.md is rewritten.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from benchmarks.assemble import store
from benchmarks.report import fill, section, summary, table

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "ladder_quality.json"
SPACE = HERE / "space_ladder.yaml"


def main() -> None:
    from benchmarks.harness import compare, machine, search_and_compare

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", action="append", default=None)
    parser.add_argument(
        "--contenders-only",
        action="store_true",
        help="keep the stored searches; measure their picks, the defaults and auto_find again",
    )
    args = parser.parse_args()
    models = args.model or ["tiny-bert", "tiny-gpt2", "tiny-llama"]
    stored = (
        {p["model"]: p for p in json.loads(RESULTS.read_text())["presets"]} if args.contenders_only else {}
    )
    presets = []
    for model in models:
        if args.contenders_only:
            result = dict(stored[model])
            pick = dict(result["contenders"]["autotune"]["params"])
            result["auto_find_halvings"], result["contenders"] = compare(model, str(SPACE), pick, 3)
        else:
            result = search_and_compare(model, trials=10, rounds=3, space=str(SPACE))
        presets.append(result)
        print(
            json.dumps({k: v for k, v in result.items() if k != "trial_times"}, default=str)[:2000],
            flush=True,
        )
    data: dict[str, Any] = {"machine": machine(), "presets": presets}
    if args.contenders_only:  # the searches are older than these rounds: say when each ran
        data["search_machine"] = (
            json.loads(RESULTS.read_text()).get("search_machine")
            or json.loads(RESULTS.read_text())["machine"]
        )
    store("ladder_quality", data)


if __name__ == "__main__":
    main()


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


def _cell(r: dict[str, Any]) -> str:
    low, high = r["min_tokens_per_s"] / 1000, r["max_tokens_per_s"] / 1000
    return f"{r['median_tokens_per_s'] / 1000:.1f}k ({low:.1f}-{high:.1f}k)"


def _batch(r: dict[str, Any]) -> Any:
    return r["params"].get("per_device_train_batch_size")


def _compiles(presets: list[dict[str, Any]]) -> list[list[Any]]:
    """What keeps the measured share low: the trials that compiled (each configuration compiles
    cold once; a reused trial, whose stored figures repeat another's, is left out), their windows,
    and the share the same search would have measured had those compiles cost nothing."""
    rows = []
    for row in presets:
        tb = row.get("time_breakdown") or {}
        ran = [t for t in row.get("trial_times") or [] if t.get("wall_s", 0) >= (t.get("compile_s") or 0)]
        ran = [t for t in ran if t.get("window_s")]
        if not tb or not ran:
            continue
        compiled = [t for t in ran if (t.get("compile_s") or 0) > 1.0]
        eager = [t for t in ran if t not in compiled]
        compile_s = math.fsum(t["compile_s"] for t in compiled)

        def median_window(trials: list[dict[str, Any]]) -> str:
            return f"{summary(t['window_s'] for t in trials)['median']:.1f} s" if trials else "-"

        rows.append(
            [
                row["model"],
                len(ran),
                len(compiled),
                f"{compile_s:.0f} s ({compile_s / tb['wall_s']:.0%} of the wall)",
                median_window(compiled),
                median_window(eager),
                f"{tb['phases']['window_s'] / (tb['wall_s'] - compile_s):.0%}",
            ]
        )
    return rows


def render(data: dict[str, Any]) -> str:
    rows, breakdown = [], []
    for row in data["presets"]:
        c = row["contenders"]
        pick, auto = c["autotune"], c["auto_find_batch_size"]
        rows.append(
            [
                row["model"],
                _cell(c["defaults"]),
                f"{_cell(auto)} (bs {_batch(auto)})",
                f"{_cell(pick)} (bs {_batch(pick)})",
                f"{pick['over_defaults']:.2f}x",
                f"{pick['median_tokens_per_s'] / auto['median_tokens_per_s']:.2f}x",
                _own_answer(row),
            ]
        )
        tb = row.get("time_breakdown") or {}
        ph, st = tb.get("phases") or {}, tb.get("stages") or {}
        if ph:
            phases = ("setup_s", "compile_s", "warmup_s", "window_s", "screening_s", "between_s")
            breakdown.append(
                [
                    row["model"],
                    f"{tb['wall_s']:.0f} s",
                    *(f"{ph[p]:.1f} s" for p in phases),
                    f"{st.get('finalists_s', 0):.0f} s",
                    f"{100 * tb['measured_share']:.0f}%",
                ]
            )
    searched = data.get("search_machine")
    headers = ["preset", "defaults", "auto_find_batch_size", "autotune's pick", "pick vs defaults"]
    headers += ["pick vs auto_find", "the search's own answer"]
    phase_headers = ["preset", "search wall", "set-up", "compile", "warm-up", "windows", "screened out"]
    phase_headers += ["between", "finalists stage", "measured"]
    compile_headers = [
        "preset",
        "measured trials",
        "of them compiled",
        "their compiles",
        "their windows (median)",
    ]
    compile_headers += ["other trials' windows (median)", "without the trials' compiles"]
    return section(
        "ladder_quality",
        searched_at=fill("ladder_quality", "searched_at", **searched) if searched else "",
        table=table(headers, rows),
        breakdown=table(phase_headers, breakdown),
        compiles=table(compile_headers, _compiles(data["presets"])),
        **data["machine"],
    )


def claims(data: dict[str, Any]) -> list[str]:
    out = []
    for row in data["presets"]:
        c = row["contenders"]
        out.append(
            fill(
                "ladder_quality",
                "claim",
                model=row["model"],
                batch=_batch(c["autotune"]),
                over_defaults=c["autotune"]["over_defaults"],
                vs_auto=c["autotune"]["median_tokens_per_s"]
                / c["auto_find_batch_size"]["median_tokens_per_s"],
                auto_batch=_batch(c["auto_find_batch_size"]),
            )
        )
    for row in data["presets"]:
        tb = row.get("time_breakdown") or {}
        if tb.get("phases"):
            share = 100 * tb["measured_share"]
            out.append(
                fill("ladder_quality", "cost_claim", model=row["model"], wall_s=tb["wall_s"], share=share)
            )
    return out
