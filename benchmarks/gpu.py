"""The GPU part of the benchmarks: item 2 on a CUDA device with GPU-sized presets.

    python benchmarks/gpu.py                       # gpt2-124m (seq 1024) and llama-1b, space_gpu.yaml
    python benchmarks/gpu.py --model gpt2-124m --trials 12 --space default

For each preset: autotune's search, then the Transformers defaults, `auto_find_batch_size` and
autotune's pick measured in interleaved rounds; tokens/s, MFU (against the device's peak FLOPS from
`autotune.measure.flops`; empty for a device not in its table), peak memory, trials and wall time to the
best. Then the GPU-only knob values (issue 32: Liger's kernels, fp8, bf16 base weights) measured once
each against bf16 on one preset, and LoRA on that preset with a bf16 and a 4-bit (QLoRA) base
(``--knobs-model``, about 3 minutes; ``--knobs-model none`` skips them), a value this device cannot
run listed with its reason. Writes ``benchmarks/results/gpu.json`` and
``benchmarks/GPU.md``, which ``make bench`` folds into RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import quality  # noqa: E402
from harness import machine  # noqa: E402

from autotune.measure.flops import flops_per_token, mfu, model_shape  # noqa: E402
from autotune.progress import describe_params  # noqa: E402
from autotune.space import precision_of  # noqa: E402
from autotune.workloads.workload import resolve_workload  # noqa: E402


def model_flops_per_token(model: str) -> float:
    import torch

    workload = resolve_workload(model)
    with torch.device("meta"):
        n_params = sum(p.numel() for p in workload.build_model({}).parameters())
    layers, hidden = model_shape(workload.config)
    return flops_per_token(n_params, layers, hidden, workload.seq_len)


def add_mfu(run: dict[str, Any], device: str) -> None:
    per_token = model_flops_per_token(run["model"])
    for row in run["contenders"].values():
        params = row["params"]
        precision = str(params.get("precision") or precision_of(params))
        rate = row["median_tokens_per_s"]
        row["mfu"] = None if rate is None else mfu(rate, per_token, device, precision)


# The GPU-only knob values against plain bf16 (the row's reference), one measured trial each.
KNOB_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("bf16", {}),
    ("bf16 + use_liger_kernel", {"use_liger_kernel": True}),
    ("fp8 (torchao float8)", {"precision": "fp8"}),
    ("bf16 base weights", {"base_weights": "bf16"}),
)


# LoRA (`--peft lora`) on the same preset: the adapter on a bf16 base, and QLoRA's 4-bit base
# (bitsandbytes), the first the reference of the second.
LORA_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("LoRA, bf16", {}),
    ("QLoRA: LoRA on a 4-bit base", {"base_weights": "4bit"}),
)


def gpu_knobs(
    model: str,
    batch: int = 8,
    knob_rows: tuple[tuple[str, dict[str, Any]], ...] = KNOB_ROWS,
    peft: str | None = None,
) -> dict[str, Any]:
    """One search of `model` whose trials are `knob_rows` (bf16, batch `batch`; with `peft`, every
    trial trains that adapter): tokens/s and peak of each against the first row, or why it did not
    run here. No baseline or finalists: one window each."""
    import dataclasses
    import tempfile

    import autotune
    from autotune.space.availability import detect_hardware, model_support, value_unavailable

    hardware = detect_hardware()
    support = model_support(resolve_workload(model).model_class())
    support = dataclasses.replace(support, adapters=peft is not None)  # a 4-bit base trains adapters only
    base = {"per_device_train_batch_size": batch, "precision": "bf16"}
    rows: dict[str, Any] = {}
    runnable: list[tuple[str, dict[str, Any]]] = []
    for name, values in knob_rows:
        why = next(
            filter(None, (value_unavailable(k, v, hardware, support) for k, v in values.items())), None
        )
        rows[name] = {"params": {**base, **values}, "not_run": why}
        if why is None:
            runnable.append((name, {**base, **values}))
    space = {
        "per_device_train_batch_size": [batch],
        "precision": sorted({str(v["precision"]) for _, v in runnable}),
        "use_liger_kernel": sorted({bool(v.get("use_liger_kernel", False)) for _, v in runnable}),
        "base_weights": sorted({str(v.get("base_weights", "as_is")) for _, v in runnable}),
    }
    held = {"use_liger_kernel": False, "base_weights": "as_is"}
    enqueue = [{k: {**held, **values}[k] for k in space} for _, values in runnable]
    with tempfile.TemporaryDirectory(prefix="autotune-gpu-knobs-") as scratch:
        path = Path(scratch) / "knobs.yaml"
        path.write_text(json.dumps({"knobs": space}))  # JSON is YAML
        result = autotune.search(
            model=model,
            space=str(path),
            trials=len(enqueue),
            storage=f"sqlite:///{scratch}/knobs.db",
            finalists=0,
            measure_baseline=False,
            enqueue=enqueue,
            peft=peft,
        )
        trials = sorted(result.trials, key=lambda t: t.number)
    for (name, _), trial in zip(runnable, trials, strict=False):
        rows[name].update(
            state=trial.state,
            message=trial.message,
            tokens_per_s=trial.attrs.get("tokens_per_s"),
            peak_memory_bytes=trial.attrs.get("peak_memory_bytes"),
        )
    reference = rows[knob_rows[0][0]].get("tokens_per_s")
    for row in rows.values():
        rate = row.get("tokens_per_s")
        row["over_bf16"] = rate / reference if rate and reference else None
    return {"model": model, "batch": batch, "rows": rows, "peft": peft, "reference": knob_rows[0][0]}


def knobs_markdown(knobs: dict[str, Any]) -> list[str]:
    title = "LoRA (--peft lora)" if knobs.get("peft") else "GPU-only knobs"
    lines = [
        f"### {title}: {knobs['model']}, batch {knobs['batch']}, one window each\n",
        f"| configuration | tok/s | x {knobs.get('reference', 'bf16')} | peak memory | note |",
        "|---|---|---|---|---|",
    ]
    for name, row in knobs["rows"].items():
        rate, ratio, peak = row.get("tokens_per_s"), row.get("over_bf16"), row.get("peak_memory_bytes")
        note = row.get("not_run") or ("" if row.get("state") == "COMPLETE" else str(row.get("message")))
        cells = [
            name,
            "-" if rate is None else f"{rate:,.0f}",
            "-" if ratio is None else f"{ratio:.2f}x",
            "-" if peak is None else f"{peak / 2**30:.1f} GiB",
            note,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "## GPU: item 2 on " + str(m.get("gpu")) + "\n",
        f"*Measured {m['date']}; torch {m['torch']}, transformers {m['transformers']}; "
        f"autotune commit {m['commit']}. Command: `python benchmarks/gpu.py "
        f"--trials {results['trials']} --rounds {results['rounds']}`.*\n",
    ]
    for model, run in results["presets"].items():
        lines.append(
            f"### {model}: {run['cost']['trained_trials']} trials, search {run['search_wall_s']:.0f} s, "
            f"best found at trial {run['trials_to_best']}\n"
        )
        lines.append("| contender | median tok/s | x defaults | MFU | peak memory | configuration |")
        lines.append("|---|---|---|---|---|---|")
        for name, row in run["contenders"].items():
            rate, ratio, share = row["median_tokens_per_s"], row["over_defaults"], row.get("mfu")
            peak = row.get("peak_memory_bytes")
            cells = [
                name,
                "-" if rate is None else f"{rate:,.0f}",
                "-" if ratio is None else f"{ratio:.2f}x",
                "-" if share is None else f"{100 * share:.1f}%",
                "-" if peak is None else f"{peak / 2**30:.1f} GiB",
                f"`{describe_params(row['params'])}`",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(
        "Reference points (published, not measured here): hand-tuning GPT-2 124M on one A100 from fp32 to "
        "tf32, bf16, torch.compile, flash attention and fused AdamW took a step from about 1000 ms to "
        "90 ms (about 11x); well-tuned GPT-2 124M training reaches roughly 40-50% MFU on H100-class GPUs.\n"
    )
    if results.get("gpu_knobs"):
        lines += knobs_markdown(results["gpu_knobs"])
    if results.get("lora"):
        lines += knobs_markdown(results["lora"])
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="presets (default: gpt2-124m and llama-1b)")
    # The shipped default space holds max-autotune compile modes: minutes of kernel benchmarking per
    # configuration (tests/gpu's 4-trial compile test of tiny-llama, one trial max-autotune, took 183 s
    # on an H100), too slow for a benchmark.
    parser.add_argument("--space", default=str(HERE / "space_gpu.yaml"))
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(HERE), help="folder for GPU.md and results/gpu.json")
    parser.add_argument(
        "--knobs-model", default="llama-1b", help="preset for the GPU-only knobs row, or none"
    )
    args = parser.parse_args()
    info = machine()
    results: dict[str, Any] = {"machine": info, "trials": args.trials, "rounds": args.rounds, "presets": {}}
    for model in args.model or ["gpt2-124m", "llama-1b"]:
        print(f"[gpu] {model}: searching ({args.trials} trials) and comparing", flush=True)
        run = quality.run(model, args.trials, args.rounds, space=args.space)
        add_mfu(run, info.get("gpu") or "")
        results["presets"][model] = run
    if args.knobs_model != "none":
        print(f"[gpu] {args.knobs_model}: the GPU-only knob values against bf16", flush=True)
        results["gpu_knobs"] = gpu_knobs(args.knobs_model)
        print(f"[gpu] {args.knobs_model}: LoRA and QLoRA (--peft lora)", flush=True)
        results["lora"] = gpu_knobs(args.knobs_model, knob_rows=LORA_ROWS, peft="lora")
    out = Path(args.out)
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "results" / "gpu.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "GPU.md").write_text(markdown(results))
    print(f"[gpu] wrote {out / 'GPU.md'}", flush=True)


if __name__ == "__main__":
    main()
