"""What screening saves on a space where some configurations are far slower than the best.

    python benchmarks/screening.py [--repeats 2]     # 3-4 minutes per repeat on 2 CPU cores (Xeon)

The space crosses fp32 with bf16: on a CPU without native bf16 (AVX2 only) bf16 autocast runs
several times slower than fp32, so half the space is configurations that cannot win, as in the
issue's held-out test. On a CPU with native bf16 the benchmark makes bf16 steps ten times slower
itself (`slow_bf16.SlowBf16`, ``--simulate``: on by default there), so both kinds of machine measure
the same kind of space. The same 12-trial search (same seed, baseline and finalists included) runs
with screening off (``--screen-ratio 0``) and on (the default 0.5), interleaved, each in a fresh
store. Recorded per run: wall time, the winner's configuration and its re-measured tokens/s, how
many trials were screened out and the study's time breakdown. Results go to
``benchmarks/results/screening.json`` with the machine (`harness.machine`: CPU, native bf16 or not,
versions, commit).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "screening.json"
SPACE = """description: fp32 against bf16 (slow without native bf16), for the screening benchmark
knobs:
  per_device_train_batch_size: [4, 8, 16, 32]
  precision: [fp32, bf16]
  attn_implementation: [eager, sdpa]
"""
ARGS = ("--model", "tiny-gpt2", "--seq-len", "64", "--trials", "12", "--seed", "0", "--max-seconds", "10")
RUN_TIMEOUT_S = 1800  # one search; never wait forever on a stuck one


def one_search(folder: Path, ratio: float, label: str, simulate: bool) -> dict[str, Any]:
    space = folder / "space.yaml"
    space.write_text(SPACE)
    storage = f"sqlite:///{folder / f'{label}.db'}"
    command = [sys.executable, "-m", "autotune", "search", *ARGS, "--space", str(space)]
    command += ["--storage", storage, "--study", "s", "--screen-ratio", str(ratio)]
    if simulate:  # the same search through the library, which takes the slowing callback
        command = [sys.executable, __file__, "--one", str(space), storage, str(ratio)]
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    wall_s = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"search failed ({done.returncode}): {done.stderr[-2000:]}")
    study = optuna.load_study(study_name="s", storage=storage)
    winner = study.user_attrs.get("winner") or {}
    params = study.trials[winner["number"]].params if "number" in winner else None
    reasons = [t.user_attrs.get("reason") for t in study.trials]
    return {
        "screen_ratio": ratio,
        "wall_s": wall_s,
        "winner": params,
        "winner_median_tokens_per_s": winner.get("median_tokens_per_s"),
        "verdict": winner.get("verdict"),
        "trials": len(study.trials),
        "screened_out": reasons.count("screened_out"),
        "bf16_trials": sum(t.params.get("precision") == "bf16" for t in study.trials),
        "time_breakdown": study.user_attrs.get("time_breakdown"),
    }


def search_slowed(space: str, storage: str, ratio: float) -> None:
    """The CLI's search of `ARGS` through `autotune.search`, with bf16 steps slowed tenfold."""
    from slow_bf16 import SlowBf16

    import autotune
    from autotune.config import MeasureSettings

    values = dict(zip(ARGS[::2], ARGS[1::2], strict=True))
    measure = MeasureSettings(max_seconds=float(values["--max-seconds"]), screen_ratio=ratio)
    with autotune.RichReporter() as reporter:
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
            callbacks=[SlowBf16()],
        )


def main() -> None:
    sys.path.insert(0, str(HERE))
    if sys.argv[1:2] == ["--one"]:
        search_slowed(sys.argv[2], sys.argv[3], float(sys.argv[4]))
        return
    from harness import machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--simulate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="slow bf16 steps tenfold (default: where the CPU has native bf16)",
    )
    args = parser.parse_args()
    simulate = machine()["native_bf16"] if args.simulate is None else args.simulate
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-screening-") as temp:
        for repeat in range(args.repeats):
            order = (0.0, 0.5) if repeat % 2 == 0 else (0.5, 0.0)  # interleaved: drift hits both
            for ratio in order:
                folder = Path(temp) / f"{repeat}-{ratio}"
                folder.mkdir()
                run = one_search(folder, ratio, "run", bool(simulate))
                run["repeat"] = repeat
                runs.append(run)
                shown = ("repeat", "screen_ratio", "wall_s", "winner", "screened_out")
                print(json.dumps({k: run[k] for k in shown}), flush=True)
    summary = {}
    for ratio in (0.0, 0.5):
        mine = [r for r in runs if r["screen_ratio"] == ratio]
        summary[str(ratio)] = {
            "median_wall_s": statistics.median(r["wall_s"] for r in mine),
            "winners": [r["winner"] for r in mine],
        }
    result = {
        "machine": machine(),
        "args": list(ARGS),
        "space": SPACE,
        "simulated_slow_bf16": bool(simulate),
        "runs": runs,
        "summary": summary,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(summary, indent=1, default=str))
    from results_md import write_results

    print(f"wrote {write_results(RESULTS.parent, HERE / 'RESULTS.md')}")


if __name__ == "__main__":
    main()
