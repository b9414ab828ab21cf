"""The GPU part of the benchmarks: the end-to-end comparison (the defaults, `auto_find_batch_size`
and the pick) on a CUDA device with GPU-sized presets.

    python -m benchmarks.gpu                       # gpt2-124m (seq 1024) and llama-1b, space_gpu.yaml
    python -m benchmarks.gpu --model gpt2-124m --trials 12 --space default

For each preset: autotune's search, then the Transformers defaults, `auto_find_batch_size` and
autotune's pick measured in interleaved rounds; tokens/s, MFU (against the device's peak FLOPS from
`autotune.measure.flops`; empty for a device not in its table), peak memory, trials and wall time to the
best. Then the GPU-only knob values (issue 32: Liger's kernels, fp8, bf16 base weights) measured once
each against bf16 on one preset, and LoRA on that preset with a bf16 and a 4-bit (QLoRA) base
(``--knobs-model``, about 3 minutes; ``--knobs-model none`` skips them), a value this device cannot
run listed with its reason. Writes ``benchmarks/results/gpu.json``, whose section (`render`) takes
the place of the placeholder ``sections/gpu.md`` in RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from autotune.measure.flops import flops_per_token, mfu, model_shape
from autotune.progress import describe_params
from autotune.space import precision_of
from autotune.workloads.workload import resolve_workload
from benchmarks.assemble import store
from benchmarks.harness import machine, search_and_compare
from benchmarks.report import fill, section, table

HERE = Path(__file__).resolve().parent


def model_flops_per_token(model: str) -> float:
    import torch

    workload = resolve_workload(model)
    with torch.device(
        "meta"
    ):  # the class itself: `build_model` goes through from_pretrained, which refuses meta
        n_params = sum(p.numel() for p in workload.model_class()(workload.config).parameters())
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
    from autotune.options import MeasureSettings
    from autotune.space.availability import detect_hardware, model_support
    from autotune.space.knobs import value_unavailable

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
            # every row measured: screening had stopped eager fp8 at its second step (an H200)
            measure=MeasureSettings(screen_ratio=0.0),
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


def _figures(rate: float | None, ratio: float | None, peak: float | None) -> list[str]:
    return [
        "-" if rate is None else f"{rate:,.0f}",
        "-" if ratio is None else f"{ratio:.2f}x",
        "-" if peak is None else f"{peak / 2**30:.1f} GiB",
    ]


def _knobs(knobs: dict[str, Any]) -> str:
    rows = [
        [
            name,
            *_figures(row.get("tokens_per_s"), row.get("over_bf16"), row.get("peak_memory_bytes")),
            row.get("not_run") or ("" if row.get("state") == "COMPLETE" else str(row.get("message"))),
        ]
        for name, row in knobs["rows"].items()
    ]
    headers = ["configuration", "tok/s", f"x {knobs.get('reference', 'bf16')}", "peak memory", "note"]
    title = "LoRA (--peft lora)" if knobs.get("peft") else "GPU-only knobs"
    return fill(
        "gpu", "knobs", title=title, model=knobs["model"], batch=knobs["batch"], table=table(headers, rows)
    )


def render(results: dict[str, Any]) -> str:
    presets = []
    for model, run in results["presets"].items():
        rows = []
        for name, row in run["contenders"].items():
            rate, ratio, peak = _figures(
                row["median_tokens_per_s"], row["over_defaults"], row.get("peak_memory_bytes")
            )
            share = "-" if row.get("mfu") is None else f"{100 * row['mfu']:.1f}%"
            rows.append([name, rate, ratio, share, peak, f"`{describe_params(row['params'])}`"])
        headers = ["contender", "median tok/s", "x defaults", "MFU", "peak memory", "configuration"]
        presets.append(
            fill(
                "gpu",
                "preset",
                model=model,
                trials=run["cost"]["trained_trials"],
                search_s=run["search_wall_s"],
                best=run["trials_to_best"],
                table=table(headers, rows),
            )
        )
    knobs = "".join(_knobs(results[key]) for key in ("gpu_knobs", "lora") if results.get(key))
    m = results["machine"]
    return section(
        "gpu",
        gpu=m.get("gpu"),
        trials=results["trials"],
        rounds=results["rounds"],
        presets="\n\n".join(presets),
        knobs=knobs,
        **{key: m[key] for key in ("date", "torch", "transformers", "commit")},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="presets (default: gpt2-124m and llama-1b)")
    # The shipped default space holds max-autotune compile modes: minutes of kernel benchmarking per
    # configuration (tests/gpu's 4-trial compile test of tiny-llama, one trial max-autotune, took 183 s
    # on an H100), too slow for a benchmark.
    parser.add_argument("--space", default=str(HERE / "space_gpu.yaml"))
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None, help="a folder for results/gpu.json (default: benchmarks/)")
    parser.add_argument(
        "--knobs-model", default="llama-1b", help="preset for the GPU-only knobs row, or none"
    )
    args = parser.parse_args()
    info = machine()
    results: dict[str, Any] = {"machine": info, "trials": args.trials, "rounds": args.rounds, "presets": {}}
    for model in args.model or ["gpt2-124m", "llama-1b"]:
        print(f"[gpu] {model}: searching ({args.trials} trials) and comparing", flush=True)
        run = search_and_compare(model, args.trials, args.rounds, space=args.space)
        add_mfu(run, info.get("gpu") or "")
        results["presets"][model] = run
    if args.knobs_model != "none":
        print(f"[gpu] {args.knobs_model}: the GPU-only knob values against bf16", flush=True)
        results["gpu_knobs"] = gpu_knobs(args.knobs_model)
        print(f"[gpu] {args.knobs_model}: LoRA and QLoRA (--peft lora)", flush=True)
        results["lora"] = gpu_knobs(args.knobs_model, knob_rows=LORA_ROWS, peft="lora")
    if args.out is None:
        store("gpu", results, indent=1)
        return
    (Path(args.out) / "results").mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "results" / "gpu.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(render(results))


if __name__ == "__main__":
    main()
