"""What the finalists cost, before and after a change, side by side in one run.

    python -m benchmarks.finalists_cost --before 7452b56            # both searches, both codes
    python -m benchmarks.finalists_cost --before 7452b56 --only make_run

Two searches, each with the code of commit `--before` (a git worktree) and with this checkout's,
alternately, each a fresh process and store: ``make_run`` (``--model tiny-gpt2 --space quick
--trials 8``) and ``custom`` (12 trials of a small Llama built from a config, 32 combinations of
five knobs, sequence length 256). For each: the wall time, the finalists' seconds and share of it,
the answer's rule and verdict. Results: ``results/finalists_cost.json`` and its section (`render`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.assemble import store
from benchmarks.harness import machine, run_search, worktree
from benchmarks.report import section, summary, table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

RESULTS = HERE / "results" / "finalists_cost.json"

CUSTOM_SPACE = {
    "per_device_train_batch_size": [8, 16],
    "precision": ["fp32", "bf16"],
    "attn_implementation": ["sdpa", "eager"],
    "activation_checkpointing": [False, True],
    "optim": ["adamw_torch_fused", "adamw_torch"],
}
CUSTOM_MODEL = {  # a small Llama, not a preset: built from this config with random weights
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 344,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 4096,
    "max_position_embeddings": 512,
}

# Run inside the child process: one search, its figures as the last line of stdout (JSON).
CHILD = r"""
import json, sys, time
spec = json.loads(sys.argv[1])
import autotune
began = time.perf_counter()
result = autotune.search(**spec)
wall = time.perf_counter() - began
spent = result.study.user_attrs.get("time_breakdown") or {}
answer = result.answer
print(json.dumps({
    "wall_s": wall,
    "search_wall_s": spent.get("wall_s"),
    "stages": spent.get("stages"),
    "rule": answer.rule,
    "verdict": answer.verdict,
    "trial": answer.choice.trial if answer.choice else None,
    "alternative": answer.alternative.trial if answer.alternative else None,
    "aa": answer.aa.to_dict() if getattr(answer, "aa", None) else None,
}))
"""


def _specs(folder: Path) -> dict[str, dict[str, Any]]:
    import yaml

    model = folder / "custom-llama"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(CUSTOM_MODEL))
    space = folder / "custom_space.yaml"
    space.write_text(yaml.safe_dump({"knobs": CUSTOM_SPACE}))
    return {
        "make_run": {"model": "tiny-gpt2", "space": "quick", "trials": 8},
        "custom": {"model": str(model), "space": str(space), "trials": 12, "seq_len": 256},
    }


def _run(code: Path, spec: dict[str, Any], store: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    full = {**spec, "storage": f"sqlite:///{store}", "study": "cost"}
    done, process_s = run_search(
        [sys.executable, "-c", CHILD, json.dumps(full)], 3600, env=env, cwd=store.parent
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_s"] = process_s
    finalists = (figures.get("stages") or {}).get("finalists_s") or 0.0
    figures["finalists_share"] = (
        finalists / figures["search_wall_s"] if figures.get("search_wall_s") else None
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the commit whose finalists are the 'before'")
    parser.add_argument("--only", choices=("make_run", "custom"), action="append")
    parser.add_argument("--repeats", type=int, default=1, help="before/after pairs per search")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="finalists-cost-") as tmp, worktree(args.before, tmp) as old:
        assert old is not None  # --before is required
        folder, runs, specs = Path(tmp), [], _specs(Path(tmp))
        for name in args.only or list(specs):
            for repeat in range(args.repeats):
                order = [("before", old[1]), ("after", ROOT)]
                for label, code in order[::-1] if repeat % 2 else order:
                    figures = _run(code, specs[name], folder / f"{name}-{label}-{repeat}.db")
                    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                    runs.append({"search": name, "code": label, "repeat": repeat, "date": when, **figures})
                    print(json.dumps(runs[-1]), flush=True)
    # a run of some searches (--only) keeps the stored runs of the others, with their own machine
    names = {run["search"] for run in runs}
    kept = json.loads(RESULTS.read_text())["runs"] if RESULTS.exists() else []
    runs = [run for run in kept if run["search"] not in names] + runs
    data = {"machine": machine(), "before": args.before, "runs": runs, "custom_space": CUSTOM_SPACE}
    store("finalists_cost", data)


GOAL_SHARE = 0.30  # issue 31: at most 30% of a search's wall time in the finalists
LABELS = {"make_run": "make run", "custom": "custom"}


def render(data: dict[str, Any]) -> str:
    rows = [
        [
            run["search"],
            run["code"],
            run.get("date", "-"),
            f"{run['wall_s']:.0f}",
            f"{(run.get('stages') or {}).get('finalists_s') or 0.0:.0f}",
            "-" if run.get("finalists_share") is None else f"{100 * run['finalists_share']:.0f}%",
            f"{run['rule']}: {run['verdict']}",
        ]
        for run in data["runs"]
    ]
    headers = ["search", "code", "measured", "wall s", "finalists s", "finalists share", "answer"]
    align = ["left", "left", "left", "right", "right", "right", "left"]

    def median(search: str, code: str, figure: Callable[[dict[str, Any]], Any]) -> float | None:
        found = [figure(r) for r in data["runs"] if r["search"] == search and r["code"] == code]
        return summary(found)["median"]

    searches = list(dict.fromkeys(run["search"] for run in data["runs"]))
    shares = [median(s, "after", lambda r: r.get("finalists_share")) for s in searches]
    fell = [
        (s, after / before)
        for s in searches
        if (before := median(s, "before", _finalists_s))
        and (after := median(s, "after", _finalists_s)) is not None
    ]
    verb = "fell" if all(f < 1 for _, f in fell) else "came"
    return section(
        "finalists_cost",
        before=data["before"],
        table=table(headers, rows, align),
        goal="met" if all(s is not None and s <= GOAL_SHARE for s in shares) else "not met",
        shares=" and ".join("-" if s is None else f"{100 * s:.0f}%" for s in shares),
        fell=f"{verb} to " + " and ".join(f"{100 * f:.0f}% ({LABELS.get(s, s)})" for s, f in fell),
        **data["machine"],
    )


def _finalists_s(run: dict[str, Any]) -> float:
    return (run.get("stages") or {}).get("finalists_s") or 0.0


if __name__ == "__main__":
    main()
