"""A fresh worker's set-up for a model of about 0.5B parameters: random init from a config folder,
and ``--pretrained`` from a local folder of safetensors weights.

    python -m benchmarks.setup_cost [--repeats N]   # about 8 minutes a repeat (default 2) on 2 CPU
                                                    # cores, 12 GB of RAM at peak

The model is a Qwen2-style config of Qwen2.5-0.5B's shape (494M parameters), written to a temp
folder (random weights, nothing downloaded). Each case runs a real two-trial search through the CLI
(batch 1, sequence length 64, the search's default warm-up and window; two configurations that
differ only in the optimizer's implementation, so both are one kind for the memory probe) and reads
from each trial what autotune itself records: ``setup_s`` (from the worker taking the job to the
first optimizer step: loading the study, building the Trainer, the memory estimate, building the
model), the first step, the warm-up and the window. The first trial of a kind pays the memory
estimate's probe (a second model, a forward and backward); the second reads its figure from the
study, as every later trial of a search does. Results go to ``benchmarks/results/setup_cost.json``
and RESULTS.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from benchmarks.report import fill, measured_on, spread, store, summary, table

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "setup_cost.json"
SHAPE = {
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}
SPACE = (
    "description: two configurations of one memory kind\n"
    "knobs:\n  per_device_train_batch_size: [1]\n  optim: [adamw_torch_fused, adamw_torch]\n"
)
ARGS = ["--seq-len", "64", "--trials", "2", "--no-baseline", "--finalists", "0", "--screen-ratio", "0"]
RUN_TIMEOUT_S = 1800


def write_model(folder: Path, weights: bool) -> int:
    """The config (and with `weights` random safetensors weights); the parameter count."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**SHAPE, architectures=["Qwen2ForCausalLM"])
    config.save_pretrained(folder)
    with torch.device("meta"):
        count = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    if weights:
        AutoModelForCausalLM.from_config(config).save_pretrained(folder, safe_serialization=True)
    return int(count)


def one_case(folder: Path, pretrained: bool, repeat: int = 0) -> dict[str, Any]:
    space = folder.parent / "space.yaml"
    space.write_text(SPACE)
    storage = f"sqlite:///{folder.parent / (('p' if pretrained else 'r') + str(repeat))}.db"
    command = [sys.executable, "-m", "autotune", "search", "--model", str(folder), "--space", str(space)]
    command += [*ARGS, "--storage", storage, "--study", "setup", *(["--pretrained"] if pretrained else [])]
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    wall_s = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"search failed ({done.returncode}): {done.stdout[-1500:]} {done.stderr[-1500:]}")
    trials = sorted(optuna.load_study(study_name="setup", storage=storage).trials, key=lambda t: t.number)
    keys = ("setup_s", "first_step_s", "warmup_s", "window_s", "tokens_per_s", "peak_memory_bytes")
    # A duplicate of a trained configuration reuses its figures ("duplicate_of"): not a trial of its own.
    trained = [t.user_attrs for t in trials if t.user_attrs.get("setup_s") is not None]
    measured = [{k: attrs.get(k) for k in keys} for attrs in trained if "duplicate_of" not in attrs]
    if len(measured) != 2:
        raise RuntimeError(f"expected two measured trials, got {len(measured)}: {done.stdout[-1500:]}")
    # The first trial probed its kind (its figure stored in the study); the second read it.
    return {"pretrained": pretrained, "repeat": repeat, "wall_s": wall_s, **measured[0], "later": measured[1]}


def previous_run(path: Path, now: dict[str, Any]) -> dict[str, Any] | None:
    """The set-up figures of the run stored at `path`, when it was taken on another commit of this
    kind of machine (same CPU and core count), to show before and after side by side."""
    if not path.exists():
        return None
    old = json.loads(path.read_text())
    machine = old.get("machine") or {}
    if machine.get("commit") == now.get("commit"):
        return old.get("previous")  # a re-run of the same commit keeps what it was compared with
    if (machine.get("cpu"), machine.get("cores")) != (now.get("cpu"), now.get("cores")):
        return None
    cases = [
        {
            **{k: c.get(k) for k in ("pretrained", "setup_s", "wall_s")},
            "later_setup_s": (c.get("later") or {}).get("setup_s"),
        }
        for c in old.get("cases", [])
    ]
    return {"commit": machine.get("commit"), "date": machine.get("date"), "cases": cases}


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="searches per case (default 2)")
    repeats = parser.parse_args().repeats
    from benchmarks.harness import machine

    cases = []
    with tempfile.TemporaryDirectory(prefix="bench-setup-") as temp:
        folders = {}
        for pretrained in (False, True):
            folders[pretrained] = Path(temp) / ("pretrained" if pretrained else "random")
            folders[pretrained].mkdir()
            params = write_model(folders[pretrained], weights=pretrained)
        for repeat in range(repeats):  # each repeat a fresh study per case, the cases interleaved
            for pretrained in (False, True):
                case = {"params": params, **one_case(folders[pretrained], pretrained, repeat)}
                print(json.dumps(case), flush=True)
                cases.append(case)
    result = {"machine": machine(), "shape": SHAPE, "args": ARGS, "cases": cases}
    result["previous"] = previous_run(RESULTS, result["machine"])
    store("setup_cost", result, indent=1)


if __name__ == "__main__":
    main()


def _share(trial: dict[str, Any]) -> float:
    """A trial's set-up over its set-up, warm-up and window."""
    setup, warmup, window = (float(trial.get(k) or 0.0) for k in ("setup_s", "warmup_s", "window_s"))
    return setup / (setup + warmup + window) if setup + warmup + window else 0.0


def _figure(values: list[Any], fmt: Callable[[float], str] = lambda v: f"{v:.1f} s") -> str:
    known = [float(v) for v in values if v is not None]
    return fmt(known[0]) if len(known) == 1 else spread(summary(known), fmt)  # one run: no range


def _percent(value: float) -> str:
    return f"{100 * value:.0f}%"


def _cases(data: dict[str, Any]) -> dict[bool, list[dict[str, Any]]]:
    """The runs per case (pretrained or not), of cases that ran."""
    runs = {flag: [c for c in data["cases"] if bool(c["pretrained"]) == flag] for flag in (False, True)}
    return {flag: cases for flag, cases in runs.items() if cases}


def _later(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c.get("later") or c for c in cases]  # runs before the second trial was measured had one


def render(data: dict[str, Any]) -> str:
    previous = data.get("previous") or {}
    headers = ["model", "parameters", "set-up, first trial", "set-up, later trial", "first step", "warm-up"]
    headers += ["window", "set-up share, first / later", "search wall"]
    if previous:
        headers.append(f"set-up before (commit {previous['commit']}): first, later")
    rows = []
    for flag, cases in _cases(data).items():
        later = _later(cases)
        earlier = [c for c in previous.get("cases", []) if bool(c["pretrained"]) == flag]
        row = [
            "`--pretrained` (safetensors)" if flag else "random init",
            f"{cases[0]['params'] / 1e6:.0f}M",
            _figure([c["setup_s"] for c in cases]),
            *(
                _figure([t.get(key) for t in later])
                for key in ("setup_s", "first_step_s", "warmup_s", "window_s")
            ),
            " / ".join(_figure([_share(t) for t in trials], _percent) for trials in (cases, later)),
            _figure([c["wall_s"] for c in cases], lambda v: f"{v:.0f} s"),
        ]
        if previous:
            before = [
                _figure([c["setup_s"] for c in earlier]),
                _figure([c.get("later_setup_s") for c in earlier]),
            ]
            row.append(", ".join(before) if earlier else "-")
        rows.append(row)
    repeats = max(len(cases) for cases in _cases(data).values())
    runs = "One run" if repeats == 1 else f"Medians of {repeats} runs, with their range"
    fields = {"measured_on": measured_on(data), "args": " ".join(data["args"]), "runs": runs}
    return fill("setup_cost", "section", table=table(headers, rows), **fields) + "\n"


def claims(data: dict[str, Any]) -> list[str]:
    return [
        fill(
            "setup_cost",
            "claim",
            params=cases[0]["params"] / 1e6,
            label="pretrained" if flag else "random-init",
            later=_figure([t.get("setup_s") for t in _later(cases)]),
            later_share=_figure([_share(t) for t in _later(cases)], _percent),
            first=_figure([c["setup_s"] for c in cases]),
            first_share=_figure([_share(c) for c in cases], _percent),
        )
        for flag, cases in _cases(data).items()
    ]
