"""End to end with the batch ladder: autotune's pick against the Transformers defaults and
``auto_find_batch_size`` when the space's batches may go past 32 (item 2 of the benchmarks, over
``benchmarks/space_ladder.yaml``: the benchmark grid whose batch list ends with ``fits``).

    python benchmarks/ladder_quality.py [--model tiny-bert ...]   # 5-10 minutes per preset

Each preset: a real 10-trial search, then the defaults, ``auto_find_batch_size`` (from a batch of
64) and the search's pick measured in 3 interleaved rounds (`quality.run`). Results go to
``benchmarks/results/ladder_quality.json``, and RESULTS.md is rewritten.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "ladder_quality.json"
SPACE = HERE / "space_ladder.yaml"


def main() -> None:
    sys.path.insert(0, str(HERE))
    from harness import machine
    from quality import compare, run

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
            result = run(model, trials=10, rounds=3, space=str(SPACE))
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
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2, default=str) + "\n")
    from results_md import write_results

    print(f"wrote {write_results(RESULTS.parent, HERE / 'RESULTS.md')}")


if __name__ == "__main__":
    main()
