"""What the study's shared compile cache saves: a compiled configuration cold, then again warm.

    python -m benchmarks.compile_cache [--rounds 2]   # about 10 minutes on 2 CPU cores

Per preset, one configuration (`torch_compile: inductor`, batch 8) is measured by one real trial in
a fresh worker, three times on one fresh store: study ``cold`` (an empty cache), then ``warm-1`` and
``warm-2`` (other studies of the store: the same cache, as finalists, resumes and other workers see
it). Each trial records what autotune records (``compile_s``, ``compile_cache``,
``warmup_excess_s``, ``setup_s``); rounds repeat it on a new store. Torch's own default cache
(``/tmp/torchinductor_$USER``) is the same mechanism, per host and only while that folder survives.
Results: ``results/compile_cache.json`` and its section (`render`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import optuna

from benchmarks.assemble import store
from benchmarks.report import fill, section, summary, table

HERE = Path(__file__).resolve().parent

SPACE = "description: one compiled configuration\nknobs:\n  torch_compile: [inductor]\n"
SPACE += "  per_device_train_batch_size: [{batch}]\n"
STUDIES = ("cold", "warm-1", "warm-2")
KEYS = ("compile_s", "compile_cache", "warmup_excess_s", "setup_s", "warmup_s", "window_s", "tokens_per_s")


def compiled_trial(model: str, folder: Path, study: str, batch: int = 8) -> dict[str, Any]:
    """One real trial of `model` with `torch_compile: inductor` at `batch`, alone in study `study`
    of the store in `folder` (its compile cache next to it): what the trial recorded (`KEYS`)."""
    import autotune

    space = folder / f"space-{batch}.yaml"
    space.write_text(SPACE.format(batch=batch))
    storage = f"sqlite:///{folder / 'store.db'}"
    autotune.search(
        model=model, space=str(space), trials=1, storage=storage, study=study,
        finalists=0, measure_baseline=False,
    )  # fmt: skip
    trial = optuna.load_study(study_name=study, storage=storage).trials[0]
    if trial.state != optuna.trial.TrialState.COMPLETE:
        raise RuntimeError(f"{model} {study}: {trial.user_attrs.get('message')}")
    return {key: trial.user_attrs.get(key) for key in KEYS}


def one_round(model: str, folder: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for study in STUDIES:
        out[study] = compiled_trial(model, folder, study)
        print(json.dumps({"model": model, "study": study, **out[study]}), flush=True)
    return out


def render(data: dict[str, Any]) -> str:
    rows, findings = [], []
    for model, rounds in data["presets"].items():
        for label, studies in (("cold", ["cold"]), ("warm", ["warm-1", "warm-2"])):
            runs = [r[s] for r in rounds for s in studies]

            def cell(key: str, runs: list[dict[str, Any]] = runs) -> str:
                s = summary(float(r[key] or 0.0) for r in runs)
                return f"{s['median']:.1f} s ({s['min']:.1f}-{s['max']:.1f})"

            verdicts = ", ".join(sorted({str(r["compile_cache"]) for r in runs}))
            rows.append([model, label, cell("compile_s"), cell("warmup_excess_s"), cell("setup_s"), verdicts])
        cold = summary(float(r["cold"]["compile_s"]) for r in rounds)["median"]
        warm = summary(float(r[s]["compile_s"]) for r in rounds for s in STUDIES[1:])["median"]
        findings.append(
            fill("compile_cache", "finding", model=model, warm=warm, cold=cold, ratio=warm / cold)
        )
    headers = ["preset", "cache", "compile", "warm-up excess", "set-up", "cache verdicts"]
    return section(
        "compile_cache",
        rounds=data["rounds"],
        table=table(headers, rows),
        findings="\n".join(findings),
        **data["machine"],
    )


def main() -> None:
    from benchmarks.harness import machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", action="append", default=None)
    args = parser.parse_args()
    models = args.model or ["tiny-gpt2", "tiny-llama", "tiny-bert"]
    presets: dict[str, list[dict[str, Any]]] = {model: [] for model in models}
    with tempfile.TemporaryDirectory(prefix="bench-compile-cache-") as temp:
        for round_number in range(args.rounds):
            for model in models:
                folder = Path(temp) / f"{model}-{round_number}"
                folder.mkdir()
                presets[model].append(one_round(model, folder))
    data = {"machine": machine(), "rounds": args.rounds, "presets": presets}
    store("compile_cache", data)


if __name__ == "__main__":
    main()
