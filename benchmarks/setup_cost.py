"""A fresh worker's set-up for a model of about 0.5B parameters: random init from a config folder,
and ``--pretrained`` from a local folder of safetensors weights.

    python benchmarks/setup_cost.py      # about 5 minutes on 2 CPU cores, 12 GB of RAM at peak

The model is a Qwen2-style config of Qwen2.5-0.5B's shape (494M parameters), written to a temp
folder (random weights, nothing downloaded). Each case runs one real trial through the CLI (a
worker process, batch 1, sequence length 64, a two-step window) and reads from the trial what
autotune itself records: ``setup_s`` (from the worker taking the job to the first optimizer step:
loading the study, building the Trainer, the memory estimate's probe, building the model), the
warm-up and the window. Results go to ``benchmarks/results/setup_cost.json`` and RESULTS.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

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
SPACE = "description: one configuration\nknobs:\n  per_device_train_batch_size: [1]\n"
ARGS = ["--seq-len", "64", "--trials", "1", "--no-baseline", "--finalists", "0", "--warmup-steps", "1"]
ARGS += ["--max-steps", "2", "--screen-ratio", "0"]
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


def one_case(folder: Path, pretrained: bool) -> dict[str, Any]:
    space = folder.parent / "space.yaml"
    space.write_text(SPACE)
    storage = f"sqlite:///{folder.parent / ('p' if pretrained else 'r')}.db"
    command = [sys.executable, "-m", "autotune", "search", "--model", str(folder), "--space", str(space)]
    command += [*ARGS, "--storage", storage, "--study", "setup", *(["--pretrained"] if pretrained else [])]
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    wall_s = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"search failed ({done.returncode}): {done.stdout[-1500:]} {done.stderr[-1500:]}")
    trial = optuna.load_study(study_name="setup", storage=storage).trials[0]
    attrs = trial.user_attrs
    keys = ("setup_s", "first_step_s", "warmup_s", "window_s", "tokens_per_s", "peak_memory_bytes")
    return {"pretrained": pretrained, "wall_s": wall_s, **{k: attrs.get(k) for k in keys}}


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
    cases = [{k: c.get(k) for k in ("pretrained", "setup_s", "wall_s")} for c in old.get("cases", [])]
    return {"commit": machine.get("commit"), "date": machine.get("date"), "cases": cases}


def main() -> None:
    sys.path.insert(0, str(HERE))
    from harness import machine

    cases = []
    with tempfile.TemporaryDirectory(prefix="bench-setup-") as temp:
        for pretrained in (False, True):
            folder = Path(temp) / ("pretrained" if pretrained else "random")
            folder.mkdir()
            params = write_model(folder, weights=pretrained)
            case = {"params": params, **one_case(folder, pretrained)}
            print(json.dumps(case), flush=True)
            cases.append(case)
    RESULTS.parent.mkdir(exist_ok=True)
    result = {"machine": machine(), "shape": SHAPE, "args": ARGS, "cases": cases}
    result["previous"] = previous_run(RESULTS, result["machine"])
    RESULTS.write_text(json.dumps(result, indent=1))
    from results_md import write_results

    print(f"wrote {write_results(RESULTS.parent, HERE / 'RESULTS.md')}")


if __name__ == "__main__":
    main()
