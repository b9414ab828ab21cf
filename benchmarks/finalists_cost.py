"""What the finalists cost, before and after a change, side by side in one run.

    python benchmarks/finalists_cost.py --before 7452b56            # both searches, both codes
    python benchmarks/finalists_cost.py --before 7452b56 --only make_run

Two searches, each run with the code of commit `--before` (a git worktree) and with this
checkout's, alternately (before, after, after, before with ``--repeats 2``), every one a fresh
process with a fresh SQLite store:

- ``make_run``: the README's main job, ``--model tiny-gpt2 --space quick --trials 8``.
- ``custom``: a 12-trial search of a model that is not a preset (a small Llama built here from a
  config, random weights) over five knobs of two values each (32 combinations), sequence length
  256.

For each: the wall time, the finalists' stage (seconds and share of the search's wall time), the
answer's rule and verdict. Writes ``results/finalists_cost.json`` and ``sections/finalists_cost.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from harness import machine, write_section  # noqa: E402

RESULTS = HERE / "results" / "finalists_cost.json"
SECTION = HERE / "sections" / "finalists_cost.md"

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
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(full)],
        env=env,
        cwd=store.parent,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"search failed ({code}): {done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_s"] = time.perf_counter() - began
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
    with tempfile.TemporaryDirectory(prefix="finalists-cost-") as tmp:
        folder = Path(tmp)
        before = folder / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT, check=True)
        try:
            runs = []
            specs = _specs(folder)
            for name in args.only or list(specs):
                for repeat in range(args.repeats):
                    order = [("before", before), ("after", ROOT)]
                    if repeat % 2:
                        order.reverse()
                    for label, code in order:
                        store = folder / f"{name}-{label}-{repeat}.db"
                        figures = _run(code, specs[name], store)
                        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                        runs.append(
                            {"search": name, "code": label, "repeat": repeat, "date": when, **figures}
                        )
                        print(json.dumps(runs[-1]), flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)
    # a run of some searches (--only) keeps the stored runs of the others, with their own machine
    names = {run["search"] for run in runs}
    kept = json.loads(RESULTS.read_text())["runs"] if RESULTS.exists() else []
    runs = [run for run in kept if run["search"] not in names] + runs
    data = {"machine": machine(), "before": args.before, "runs": runs, "custom_space": CUSTOM_SPACE}
    write_section(data, RESULTS, SECTION, render)


def render(data: dict[str, Any]) -> str:
    m = data["machine"]
    lines = [
        "## What the finalists cost, before and after (`benchmarks/finalists_cost.py`)",
        "",
        f"Measured on {m.get('cpu')} ({m.get('cores', '?')} cores), commit {m.get('commit')}, against "
        f"{data['before']} as the before; each search's before and after ran one right after the other "
        f"(`python benchmarks/finalists_cost.py --before {data['before']} [--only make_run|custom]`). "
        "`custom`: a 2-layer Llama (hidden 128) built from a config, 12 trials over 5 knobs of 2 values "
        "(32 combinations), sequence length 256.",
        "",
        "| search | code | measured | wall s | finalists s | finalists share | answer |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for run in data["runs"]:
        finalists = (run.get("stages") or {}).get("finalists_s") or 0.0
        share = run.get("finalists_share")
        lines.append(
            f"| {run['search']} | {run['code']} | {run.get('date', '-')} | {run['wall_s']:.0f} | "
            f"{finalists:.0f} | "
            f"{'-' if share is None else f'{100 * share:.0f}%'} | {run['rule']}: {run['verdict']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
