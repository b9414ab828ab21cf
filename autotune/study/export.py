"""Export a study's best trial as a config to paste into a real run.

Pure: no torch or transformers import at module top (`TrainingArguments` defaults are read lazily,
when a config is built). Everything comes from the store: no trial is run again.

`select_trial` picks the trial (re-selecting under a new memory cap from the measured peaks),
`export_config` turns it into ``{"training_args", "model_kwargs", "expected"}``, and one renderer per
format turns that into text: `to_json`, `to_yaml`, `to_flags`, `to_accelerate`, `to_python`. The
flags are flags alone (the shell passes every word of ``$(cat flags.txt)`` to the script); what they
cannot hold, the expected numbers and the changes to the training math, is in `notes`, which the CLI
prints on stderr.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable
from typing import Any

import optuna

from autotune.errors import UsageError
from autotune.progress import TrialSummary, describe_time_breakdown, format_bytes
from autotune.space.defaults import training_args_defaults
from autotune.study.objective import run_lines, score, study_run_tokens
from autotune.study.outcomes import OVER_MEMORY_CAP
from autotune.study.semantics import study_changes
from autotune.study.store import (
    FINISHED,
    best_trial,
    speedup_over_baseline,
    study_cap_bytes,
    summarize_trial,
    trial_run_facts,
    winner_speedup,
)

FORMATS = ("json", "yaml", "flags", "accelerate", "python", "deepspeed")

# Always exported, even at their TrainingArguments default: the batch split defines the run.
_ALWAYS = ("per_device_train_batch_size", "gradient_accumulation_steps", "optim")
# Precision flags are exported when on (off is their default and says nothing).
_PRECISION_FLAGS = ("bf16", "fp16")
# Fields whose None default is turned into this value by TrainingArguments.__post_init__.
_EFFECTIVE_DEFAULTS: dict[str, Any] = {"activation_checkpointing": False, "gradient_checkpointing": False}


# -- selection ---------------------------------------------------------------------------------


def resolve_cap(study: optuna.Study, text: str) -> int:
    """``--memory-cap`` text in bytes (see `autotune.study.store.study_cap_bytes`)."""
    return study_cap_bytes(study, text)


def select_trial(study: optuna.Study, cap_bytes: int | None, *, cap_text: str | None = None) -> TrialSummary:
    """The trial to export: the study's best, or with `cap_bytes` the best whose measured peak fits.

    Without a cap this is `autotune.study.store.best_trial` (the re-measured winner, never an infeasible
    trial). With a cap the choice is remade from the stored measurements: the winner if it fits,
    else the highest tokens/s among completed, non-duplicate trials with a finite loss and a peak
    <= cap. The stored ``feasible`` flag was judged against the study's own cap, so it is not used;
    trials pruned only for being over that cap were fully measured and count too.

    Raises:
        UsageError: no trial qualifies (the message names the cap and the smallest measured peak).
    """
    if cap_bytes is None:
        best = best_trial(study)
        if best is None:
            raise UsageError(
                f"study {study.study_name!r} has no feasible completed trial to export",
                f"run more trials: {_search_command(study)}",
            )
        return best
    summaries = [summarize_trial(t) for t in study.get_trials(deepcopy=False, states=FINISHED)]
    measured = [s for s in summaries if _measured(s)]
    fitting = [s for s in measured if int(s.peak_memory_bytes or 0) <= cap_bytes]
    if not fitting:
        cap_shown = cap_text or format_bytes(cap_bytes)
        smallest = min(measured, key=lambda s: int(s.peak_memory_bytes or 0), default=None)
        seen = (
            f"the smallest measured peak is {format_bytes(int(smallest.peak_memory_bytes or 0))} "
            f"(trial {smallest.number})"
            if smallest is not None
            else "no trial has a measured peak"
        )
        raise UsageError(
            f"no trial of study {study.study_name!r} fits the memory cap {cap_shown}: {seen}",
            f"search under that cap: {_search_command(study, cap_text or _cap_arg(cap_bytes))}",
        )
    winner = study.user_attrs.get("winner")
    if winner is not None:
        for summary in fitting:
            if summary.number == winner.get("number"):
                return summary
    tokens = study_run_tokens(study.user_attrs)
    return max(fitting, key=lambda s: (score(s.attrs, tokens) or 0.0, -s.number))


def _measured(summary: TrialSummary) -> bool:
    """A trial with full measurements that could be exported under some cap."""
    if "duplicate_of" in summary.attrs or summary.tokens_per_s is None or summary.peak_memory_bytes is None:
        return False
    loss = summary.attrs.get("train_loss")
    if loss is not None and not (isinstance(loss, (int, float)) and math.isfinite(loss)):
        return False
    if summary.state == "COMPLETE":
        return True
    return (
        summary.state == "PRUNED" and summary.reason == OVER_MEMORY_CAP
    )  # fully measured: a larger cap can take it


def _search_command(study: optuna.Study, cap: str | None = None) -> str:
    run = study.user_attrs.get("run_config") or {}
    workload = study.user_attrs.get("workload") or {}
    parts = ["autotune", "search"]
    model = workload.get("model") or run.get("model")
    if model:
        parts += ["--model", str(model)]
    if run.get("space"):
        parts += ["--space", str(run["space"])]
    if workload.get("seq_len"):
        parts += ["--seq-len", str(workload["seq_len"])]
    if cap is not None:
        parts += ["--memory-cap", cap]
    return " ".join(shlex.quote(p) for p in parts)


def _cap_arg(cap_bytes: int) -> str:
    return f"{math.floor(cap_bytes / 2**20)}MiB"


# -- the exported config -----------------------------------------------------------------------


def export_config(study: optuna.Study, trial: TrialSummary) -> dict[str, Any]:
    """``{"training_args", "model_kwargs", "expected"}`` for one trial of `study`.

    ``training_args`` is the trial's applied `TrainingArguments` kwargs over the study's base config,
    less what equals the `TrainingArguments` default (the batch split and optimizer are always kept,
    bf16/fp16 when on). ``model_kwargs`` are the model-load kwargs (normally ``attn_implementation``;
    a ``dtype`` only when the base config asked for one). ``expected`` is what the search measured.
    """
    base_args = dict(study.user_attrs.get("base_args") or {})
    applied = dict(trial.attrs.get("training_args") or {})
    training_args = _minimal_args({**base_args, **applied})

    base_model = dict(study.user_attrs.get("base_model_kwargs") or {})
    model_kwargs = {**base_model, **dict(trial.attrs.get("model_kwargs") or {})}
    for key in ("dtype", "torch_dtype"):
        if key not in base_model:
            model_kwargs.pop(key, None)

    workload = study.user_attrs.get("workload") or {}
    run = study.user_attrs.get("run_config") or {}
    tokens = float(trial.tokens_per_s) if trial.tokens_per_s is not None else None
    compared = speedup_over_baseline(study, trial)
    speedup, base_tokens = (round(compared[0], 3), compared[1]) if compared else (None, None)
    winner = study.user_attrs.get("winner") or {}
    remeasured = winner.get("median_tokens_per_s") if winner.get("number") == trial.number else None
    paired = winner_speedup(study, trial)
    ci = trial.rel_ci_halfwidth
    expected = {
        "tokens_per_s": tokens,
        # the 95% confidence half-width of the trial's throughput, relative to it
        "rel_ci_halfwidth": float(ci) if ci is not None and math.isfinite(ci) else None,
        "peak_memory_bytes": trial.peak_memory_bytes,
        "speedup_over_baseline": speedup,
        # the re-measured speedup's 95% interval, and whether it lies above the gain worth a change
        "speedup_interval": [paired["low"], paired["high"]] if paired else None,
        "beats_baseline": paired["beats_baseline"] if paired else None,
        "baseline_tokens_per_s": float(base_tokens) if base_tokens else None,
        "remeasured_tokens_per_s": remeasured,
        "trial": trial.number,
        "study": study.study_name,
        "model": workload.get("model") or run.get("model"),
        "task": workload.get("task", "causal-lm"),
        "seq_len": workload.get("seq_len") or run.get("seq_len"),
        "device": (study.user_attrs.get("device") or {}).get("device"),
        # processes per trial (a DDP/FSDP/ZeRO group); the accelerate export launches as many
        "world_size": int(trial.attrs.get("world_size") or run.get("nproc_per_node") or 1),
        "semantic_changes": [
            c.to_dict()
            for c in study_changes(study.user_attrs, trial.params, trial.attrs.get("training_args"))
        ],
        # loss delta vs the baseline at equal tokens; predicted run time and cost, or compile payoff
        **trial_run_facts(study, trial),
        # what the search that found it cost (`autotune.driver.accounting`)
        "search_time": study.user_attrs.get("time_breakdown"),
    }
    config: dict[str, Any] = {
        "training_args": training_args,
        "model_kwargs": model_kwargs,
        "expected": expected,
    }
    if trial.params.get("padding_free"):
        config["data_collator"] = FLATTENING
    return config


# The collator of a padding-free trial, as the user's script constructs it.
FLATTENING = "DataCollatorWithFlattening(return_position_ids=True, separator_id=-100)"


def collator_line(config: dict[str, Any]) -> str | None:
    """What to pass as the Trainer's data collator, when the exported trial needs one."""
    collator = config.get("data_collator")
    if not collator:
        return None
    return (
        f"data collator, not a TrainingArguments flag: Trainer(..., data_collator={collator}) "
        "(from transformers; padding-free batches of one text per sample)"
    )


def _minimal_args(merged: dict[str, Any]) -> dict[str, Any]:
    defaults = training_args_defaults()
    first = [k for k in _ALWAYS if k in merged]
    out: dict[str, Any] = {}
    for key in [*first, *(k for k in merged if k not in first)]:
        value = merged[key]
        if key in _ALWAYS or (key in _PRECISION_FLAGS and value is True):
            out[key] = value
            continue
        default = defaults.get(key, _MISSING)
        if value == default or (default is None and value == _EFFECTIVE_DEFAULTS.get(key, _MISSING)):
            continue
        out[key] = value
    return out


_MISSING = object()


# -- renderers ---------------------------------------------------------------------------------


def expected_lines(config: dict[str, Any]) -> list[str]:
    """What the search expects of the config, in words: the comment lines the yaml, accelerate and
    python formats start with (without the comment marker), and the flags format's `notes`."""
    exp = config["expected"]
    what = f"study {exp['study']}, trial {exp['trial']}, model {exp['model']}"
    if exp.get("seq_len"):
        what += f" ({exp.get('task')}, seq len {exp['seq_len']})"
    tokens = exp.get("tokens_per_s")
    parts = [f"{tokens:,.0f} tokens/s" if tokens is not None else "throughput not measured"]
    if tokens is not None and exp.get("rel_ci_halfwidth") is not None:
        parts[0] += f" ±{100 * exp['rel_ci_halfwidth']:.1f}% (95% interval)"
    if exp.get("remeasured_tokens_per_s"):
        parts[0] += f" (re-measured median {exp['remeasured_tokens_per_s']:,.0f})"
    peak = exp.get("peak_memory_bytes")
    parts.append(f"peak memory {format_bytes(int(peak))}" if peak is not None else "peak memory not measured")
    speedup = exp.get("speedup_over_baseline")
    interval = exp.get("speedup_interval")
    if speedup is not None:
        within = f", 95% interval {interval[0]:.2f}-{interval[1]:.2f}x" if interval else ""
        parts.append(
            f"{speedup:.2f}x the baseline{within} (measured at {exp['baseline_tokens_per_s']:,.0f} tokens/s)"
        )
    else:
        parts.append("no baseline measured")
    lines = [f"autotune export: {what}", f"expected: {', '.join(parts)}"]
    if exp.get("beats_baseline") is False:
        lines.append(
            "nothing beat the defaults measurably: keeping them is as fast (this is the best measured)"
        )
    lines += run_lines(exp)
    spent = describe_time_breakdown(exp.get("search_time"))
    if spent:
        lines.append(spent)
    changes = exp.get("semantic_changes") or []
    if changes:
        lines.append("changes the training math, compared with the baseline:")
        lines += [f"  {change['text']}" for change in changes]
    else:
        lines.append("training math as the baseline's (precision, optimizer family, effective batch)")
    return lines


def _comment(config: dict[str, Any]) -> str:
    return "".join(f"# {line}\n" for line in expected_lines(config))


def _plain(config: dict[str, Any]) -> dict[str, Any]:
    plain = {
        "training_args": dict(config["training_args"]),
        "model_kwargs": dict(config["model_kwargs"]),
        "expected": dict(config["expected"]),
    }
    if config.get("data_collator"):
        plain["data_collator"] = config["data_collator"]
    return plain


def to_json(config: dict[str, Any]) -> str:
    """The config as JSON (the throughput, peak and speedup are under ``expected``)."""
    return json.dumps(_plain(config), indent=2) + "\n"


def to_yaml(config: dict[str, Any]) -> str:
    """The config as YAML, with the expected numbers also as a comment on top."""
    import yaml

    return _comment(config) + yaml.safe_dump(_plain(config), sort_keys=False)


def flag_args(training_args: dict[str, Any]) -> list[str]:
    """`TrainingArguments` kwargs as `HfArgumentParser` command-line arguments that parse back to
    the same values: a true boolean is a bare flag, anything else ``--name value`` (a dict as JSON
    without spaces)."""
    args: list[str] = []
    for key, value in training_args.items():
        if value is None:
            continue  # the exported args hold no None that differs from a default
        if value is True:
            args.append(f"--{key}")
        elif isinstance(value, (list, tuple)):
            args += [f"--{key}", *(str(v) for v in value)]
        elif isinstance(value, dict):
            args += [f"--{key}", json.dumps(value, separators=(",", ":"))]
        else:
            args += [f"--{key}", str(value)]
    return args


# What the shell does to an unquoted `$(cat FILE)`: it splits on whitespace and expands globs.
_GLOB_CHARACTERS = frozenset("*?[")


def to_flags(config: dict[str, Any]) -> str:
    """`TrainingArguments` flags alone, for ``python run_clm.py $(cat flags.txt)`` with the Hugging
    Face example scripts: the shell passes every word of the file as an argument, so it holds no
    comment and no quoting. What the search expects and the model-load kwargs are `notes` (the CLI
    prints them on stderr).

    Raises:
        UsageError: a value that would not reach the script as one unchanged word (whitespace, a
            glob character, an empty string).
    """
    args = flag_args(config["training_args"])
    for index, word in enumerate(args):
        if not word or any(c.isspace() or c in _GLOB_CHARACTERS for c in word):
            flag = (
                word
                if word.startswith("--")
                else next(a for a in reversed(args[:index]) if a.startswith("--"))
            )
            raise UsageError(
                f"{flag}={word!r} cannot be a flag read by `$(cat FILE)`: the shell would split or expand it",
                "export with --format json or yaml, or change the value in --base-args",
            )
    return " ".join(args) + "\n"


def notes(config: dict[str, Any], fmt: str) -> list[str]:
    """What format `fmt` cannot hold itself, for the CLI to print on stderr: for flags, the expected
    numbers, the changes to the training math and the model-load kwargs. The other formats carry
    them (as data or as comments): nothing."""
    if fmt not in ("flags", "deepspeed"):  # the files that hold nothing but their settings
        return []
    lines = expected_lines(config)
    model_kwargs = config["model_kwargs"]
    if model_kwargs:
        kwargs = ", ".join(f"{k}={v!r}" for k, v in model_kwargs.items())
        lines.append(
            f"model-load kwargs, not TrainingArguments flags (the example scripts have no flag for them): "
            f"pass {kwargs} to from_pretrained"
        )
    collator = collator_line(config)
    if collator:
        lines.append(collator)
    return lines


def accelerate_dict(config: dict[str, Any]) -> dict[str, Any]:
    """The accelerate config (``accelerate launch --config_file``) for the exported trial."""
    args = config["training_args"]
    mixed = "bf16" if args.get("bf16") else "fp16" if args.get("fp16") else "no"
    out: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "NO",
        "mixed_precision": mixed,
        "num_processes": 1,
        "num_machines": 1,
        "machine_rank": 0,
        "main_training_function": "main",
        "use_cpu": bool(args.get("use_cpu", config["expected"].get("device") == "cpu")),
    }
    ranks = int(config["expected"].get("world_size") or 1)
    if ranks > 1:
        out["num_processes"] = ranks
        out["distributed_type"] = "MULTI_CPU" if out["use_cpu"] else "MULTI_GPU"
    out.update(_sharding(args))
    backend = args.get("torch_compile_backend")
    mode = args.get("torch_compile_mode")
    if args.get("torch_compile") or backend or mode:
        dynamo: dict[str, Any] = {"dynamo_backend": str(backend or "inductor").upper()}
        if mode:
            dynamo["dynamo_mode"] = str(mode)
        out["dynamo_config"] = dynamo
    return out


def _sharding(args: dict[str, Any]) -> dict[str, Any]:
    """accelerate's FSDP or DeepSpeed section for a trial that sharded the model (on GPUs: the
    only place FSDP runs), else nothing."""
    if args.get("fsdp"):
        fsdp = dict(args.get("fsdp_config") or {})
        return {
            "distributed_type": "FSDP",
            "fsdp_config": {
                "fsdp_version": int(fsdp.get("version", 2)),
                "fsdp_reshard_after_forward": bool(fsdp.get("reshard_after_forward", True)),
                "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                "fsdp_offload_params": False,
                "fsdp_cpu_ram_efficient_loading": False,
                "fsdp_activation_checkpointing": False,
            },
        }
    deepspeed = args.get("deepspeed")
    if isinstance(deepspeed, dict):
        stage = int((deepspeed.get("zero_optimization") or {}).get("stage", 0))
        return {
            "distributed_type": "DEEPSPEED",
            "deepspeed_config": {
                "zero_stage": stage,
                "gradient_accumulation_steps": int(args.get("gradient_accumulation_steps", 1)),
                "gradient_clipping": float(args.get("max_grad_norm", 1.0)),
                "offload_optimizer_device": "none",
                "offload_param_device": "none",
                "zero3_init_flag": stage == 3,
            },
        }
    return {}


def to_accelerate(config: dict[str, Any]) -> str:
    """An accelerate config YAML: precision and torch.compile; the batch split and the rest stay
    TrainingArguments (listed in a comment)."""
    import yaml

    rest = " ".join(shlex.quote(a) for a in flag_args(config["training_args"]))
    text = _comment(config) + f"# TrainingArguments still to pass: {rest}\n"
    if config["model_kwargs"]:
        kwargs = ", ".join(f"{k}={v!r}" for k, v in config["model_kwargs"].items())
        text += f"# model-load kwargs: from_pretrained(..., {kwargs})\n"
    collator = collator_line(config)
    if collator:
        text += f"# {collator}\n"
    return text + yaml.safe_dump(accelerate_dict(config), sort_keys=False)


def to_python(config: dict[str, Any]) -> str:
    """A Python snippet that builds the `TrainingArguments` and loads the model."""
    exp = config["expected"]
    auto = (
        "AutoModelForSequenceClassification"
        if exp.get("task") == "sequence-classification"
        else "AutoModelForCausalLM"
    )
    lines = [line.rstrip() for line in _comment(config).splitlines()]
    lines += [
        f"from transformers import {auto}, TrainingArguments",
        "",
        f"MODEL = {_py(str(exp.get('model') or 'your-model'))}  # a hub id or a local checkpoint directory",
        "",
        "training_args = TrainingArguments(",
        '    output_dir="output",',
        *(f"    {key}={_py(value)}," for key, value in config["training_args"].items()),
        ")",
    ]
    kwargs = "".join(f", {key}={_py(value)}" for key, value in config["model_kwargs"].items())
    lines.append(f"model = {auto}.from_pretrained(MODEL{kwargs})")
    if config.get("data_collator"):
        lines[lines.index(f"from transformers import {auto}, TrainingArguments")] = (
            f"from transformers import {auto}, DataCollatorWithFlattening, TrainingArguments"
        )
        lines.append(
            f"data_collator = {config['data_collator']}  # Trainer(..., data_collator=data_collator)"
        )
    return "\n".join(lines) + "\n"


def to_deepspeed(config: dict[str, Any]) -> str:
    """The DeepSpeed config (``ds_config.json``) of a trial that trained with ZeRO: what
    ``TrainingArguments(deepspeed="ds_config.json")``, ``--deepspeed ds_config.json`` and accelerate's
    ``deepspeed_config_file`` take. Its batch sizes and clipping are ``"auto"``: the Trainer fills them
    from its own arguments.

    Raises:
        UsageError: the trial trained without DeepSpeed.
    """
    deepspeed = config["training_args"].get("deepspeed")
    if not isinstance(deepspeed, dict):
        raise UsageError(
            f"trial {config['expected'].get('trial')} trained without DeepSpeed (data_parallel is not "
            "zero1-3): there is no ds_config to export",
            "export --format accelerate or json for its launch settings",
        )
    return json.dumps(deepspeed, indent=2) + "\n"


def _py(value: Any) -> str:
    """A Python literal for `value` (strings in double quotes, as the rest of the snippet)."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "json": to_json,
    "yaml": to_yaml,
    "flags": to_flags,
    "accelerate": to_accelerate,
    "python": to_python,
    "deepspeed": to_deepspeed,
}


def render(config: dict[str, Any], fmt: str) -> str:
    """`config` in format `fmt` (one of `FORMATS`).

    Raises:
        UsageError: an unknown format, or one the trial has nothing for (`to_deepspeed`).
    """
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise UsageError(f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    return renderer(config)
