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
import shlex
from collections.abc import Callable, Mapping
from typing import Any

import optuna

from autotune.config import cap_bytes
from autotune.errors import UsageError
from autotune.progress import describe_params, describe_time_breakdown, format_bytes
from autotune.records import (
    BEATS_DEFAULTS,
    CHOSEN,
    KEEPS_MATH,
    Answer,
    Interval,
    TrialRecord,
    WholeRun,
    read_study,
)
from autotune.space.defaults import training_args_defaults
from autotune.space.knobs import fp8_trial
from autotune.study.choices import measured_in_full, search_choice
from autotune.study.objective import defaults_run_facts, run_lines
from autotune.study.semantics import study_changes
from autotune.study.store import read_trials, trial_run_facts

FORMATS = ("json", "yaml", "flags", "accelerate", "python", "deepspeed")

# Always exported, even at their TrainingArguments default: the batch split defines the run.
_ALWAYS = ("per_device_train_batch_size", "gradient_accumulation_steps", "optim")
# Precision flags are exported when on (off is their default and says nothing).
_PRECISION_FLAGS = ("bf16", "fp16")
# Fields whose None default is turned into this value by TrainingArguments.__post_init__.
_EFFECTIVE_DEFAULTS: dict[str, Any] = {"activation_checkpointing": False, "gradient_checkpointing": False}


# -- the answer's config -----------------------------------------------------------------------


def resolve_cap(study: optuna.Study, text: str) -> int:
    """``--memory-cap`` text in bytes: a fraction (``90%``) is of the device the study ran on.

    Raises:
        UsageError: not a cap, or a fraction and the study does not record its device's memory.
    """
    capped = cap_bytes(text, read_study(study).device_memory_bytes, study=study.study_name)
    assert capped is not None  # `text` is a cap
    return capped


def no_answer_error(study: optuna.Study, answer: Answer, cap_text: str | None = None) -> UsageError:
    """What exporting an answer with nothing to hand back says."""
    if cap_text is not None:
        measured = [t for t in read_trials(study) if measured_in_full(t, recapped=True)]
        smallest = min(measured, key=lambda t: int(t.peak_memory_bytes or 0), default=None)
        seen = (
            f"the smallest measured peak is {format_bytes(int(smallest.peak_memory_bytes or 0))} "
            f"(trial {smallest.number})"
            if smallest is not None
            else "no trial has a measured peak"
        )
        return UsageError(
            f"no trial of study {study.study_name!r} fits the memory cap {cap_text}: {seen}",
            f"search under that cap: {_search_command(study, cap_text)}",
        )
    return UsageError(
        f"study {study.study_name!r} has no feasible completed trial to export ({answer.verdict})",
        f"run more trials: {_search_command(study)}",
    )


def _search_command(study: optuna.Study, cap: str | None = None) -> str:
    record = read_study(study)
    parts = ["autotune", "search"]
    if record.model:
        parts += ["--model", str(record.model)]
    if record.run_config.get("space"):
        parts += ["--space", str(record.run_config["space"])]
    if record.workload.get("seq_len"):
        parts += ["--seq-len", str(record.workload["seq_len"])]
    if cap is not None:
        parts += ["--memory-cap", cap]
    return " ".join(shlex.quote(p) for p in parts)


def export_config(
    study: optuna.Study, answer: Answer | TrialRecord, *, cap_text: str | None = None
) -> dict[str, Any]:
    """``{"training_args", "model_kwargs", "expected"}`` of what `answer` hands back (given a trial
    instead: that trial, as its search window measured it, chosen by the caller).

    ``training_args`` is the choice's applied `TrainingArguments` kwargs over the study's base
    config, less what equals the `TrainingArguments` default (the batch split and optimizer are
    always kept, bf16/fp16 when on): the defaults' own when the answer keeps them.
    ``model_kwargs`` are the model-load kwargs (normally ``attn_implementation``; a ``dtype`` only
    when the base config asked for one). ``expected`` holds the answer's figures: the re-measured
    medians with their intervals (the search window's only where nothing was re-measured, and
    ``remeasured`` says which), its speedup, verdict, the alternative, and what it changes.

    Raises:
        UsageError: the answer has nothing to hand back.
    """
    record = read_study(study)
    if isinstance(answer, TrialRecord):
        answer = Answer(
            CHOSEN,
            f"trial {answer.number}, as chosen (its search window's figures)",
            search_choice(record, answer),
            baseline_tokens_per_s=record.baseline.tokens_per_s,
        )
    choice = answer.choice
    if choice is None:
        raise no_answer_error(study, answer, cap_text)
    training_args = _minimal_args({**record.base_args, **choice.training_args})
    model_kwargs = {**record.base_model_kwargs, **choice.model_kwargs}
    for key in ("dtype", "torch_dtype"):
        # a dtype the trial ran with stays only where the base config or the base_weights knob asked
        if key not in record.base_model_kwargs and choice.params.get("base_weights", "as_is") == "as_is":
            model_kwargs.pop(key, None)
    if fp8_trial(choice.params):
        # accelerate's fp8 comes from the launcher; TrainingArguments' bf16 would override it
        training_args.pop("bf16", None)
    trials = read_trials(study)
    trial = next((t for t in trials if t.number == choice.trial), None)
    tokens = choice.tokens_per_s
    speedup = choice.speedup
    expected = {
        "verdict": answer.verdict,
        "rule": answer.rule,
        "trial": choice.trial,  # None: the defaults
        "params": dict(choice.params),
        "tokens_per_s": tokens.value if tokens else None,
        # the re-measured mean's 95% interval (the noise pooled over the rounds), or the search window's own
        "tokens_per_s_interval": [tokens.low, tokens.high] if tokens and tokens.low is not None else None,
        "remeasured": choice.remeasured,
        "rounds": tokens.rounds if tokens and choice.remeasured else None,
        "peak_memory_bytes": choice.peak_memory_bytes,
        "speedup_over_baseline": round(speedup.value, 3) if speedup else None,
        "speedup_interval": [speedup.low, speedup.high] if speedup and speedup.low is not None else None,
        "beats_baseline": answer.rule in (BEATS_DEFAULTS, KEEPS_MATH) and not choice.is_defaults,
        "baseline_tokens_per_s": answer.baseline_tokens_per_s,
        "alternative": _alternative(answer),
        "memory_cap_bytes": answer.memory_cap_bytes,
        "study": study.study_name,
        "model": record.model,
        "task": record.workload.get("task", "causal-lm"),
        "seq_len": record.seq_len,
        "device": record.device.get("device"),
        # processes per trial (a DDP/FSDP/ZeRO group); the accelerate export launches as many
        "world_size": int(
            (trial.measurement.world_size if trial else None) or record.run_config.get("nproc_per_node") or 1
        ),
        "semantic_changes": [c.to_dict() for c in study_changes(record, choice.params, choice.training_args)],
        # loss delta vs the baseline at equal tokens; predicted run time and cost, or compile payoff
        **(trial_run_facts(study, trial) if trial is not None else defaults_run_facts(record)),
        # what the search that found it cost (`autotune.driver.accounting`)
        "search_time": record.time_breakdown,
        # the baseline measured twice in each finalists' round: it widened every interval above
        "aa": answer.aa.to_dict() if answer.aa else None,
        "aa_text": answer.aa.describe() if answer.aa else None,
        # where the finalists' rounds spent their time
        "finalists_time": answer.finalists_time,
        # the parameters trained (a peft adapter's) and all the model's: every trial's are the same
        "parameters": _parameters(trial, trials),
        # its whole-run check: the longest batch, an evaluation step, a checkpoint save
        "whole_run": answer.whole_run.to_dict() if answer.whole_run else None,
        "whole_run_peak_bytes": answer.whole_run.peak_bytes if answer.whole_run else None,
        "whole_run_headroom_bytes": answer.whole_run.headroom_bytes if answer.whole_run else None,
        "whole_run_note": answer.whole_run_note,
    }
    config: dict[str, Any] = {
        "training_args": training_args,
        "model_kwargs": model_kwargs,
        "expected": expected,
    }
    if record.peft:  # as peft loads it: LoraConfig(**config["peft"]), next to the TrainingArguments
        config["peft"] = dict(record.peft)
    if choice.params.get("padding_free"):
        config["data_collator"] = FLATTENING
    if fp8_trial(choice.params):
        config["mixed_precision"] = "fp8"
    if int(choice.params.get("pad_to_multiple_of", 1)) > 1:
        config["pad_to_multiple_of"] = int(choice.params["pad_to_multiple_of"])
    return config


def _parameters(trial: TrialRecord | None, trials: list[TrialRecord]) -> dict[str, int] | None:
    """``{"trainable", "total"}`` parameters of the chosen trial's model (the defaults: any trial's,
    the same model); None where no trial recorded them (older stores)."""
    counted = [t for t in ([trial] if trial is not None else []) + trials if t.trainable_params is not None]
    if not counted:
        return None
    return {"trainable": int(counted[0].trainable_params or 0), "total": int(counted[0].total_params or 0)}


def _count(n: int) -> str:
    """A parameter count as people write it: 3,584; 358k; 1.24M; 7.62B."""
    for size, unit in ((1e9, "B"), (1e6, "M")):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n / 1e3:.0f}k" if n >= 10_000 else f"{n:,}"


def parameters_text(parameters: Mapping[str, Any] | None) -> str | None:
    """``parameters: 3,584 trainable of 358k (1.0%, a peft adapter; ...)``: only where some
    weights are frozen, with what MFU counts for them."""
    if not parameters or not parameters.get("total"):
        return None
    trainable, total = int(parameters["trainable"]), int(parameters["total"])
    if trainable >= total:
        return None
    return (
        f"parameters: {_count(trainable)} trainable of {_count(total)} "
        f"({100 * trainable / total:.1f}%, a peft adapter); MFU counts no weight-gradient FLOPs "
        "for the frozen weights (4 per token each, forward and input gradient; 6 for trainable ones)"
    )


def _alternative(answer: Answer) -> dict[str, Any] | None:
    other = answer.alternative
    if other is None:
        return None
    return {
        "trial": other.trial,
        "params": dict(other.params),
        "tokens_per_s": other.tokens_per_s.value if other.tokens_per_s else None,
        "remeasured": other.remeasured,
        "peak_memory_bytes": other.peak_memory_bytes,
        "speedup_over_baseline": other.speedup.value if other.speedup else None,
        "gain_over_answer": answer.alternative_gain.to_dict() if answer.alternative_gain else None,
        "answer_label": answer.choice.label if answer.choice else None,
        "semantic_changes": list(other.changes),
    }


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
    """What the answer expects of the config, in words: the comment lines the yaml, accelerate and
    python formats start with (without the comment marker), and the flags format's `notes`."""
    exp = config["expected"]
    which = "the defaults" if exp.get("trial") is None else f"trial {exp['trial']}"
    what = f"study {exp['study']}, {which}, model {exp['model']}"
    if exp.get("seq_len"):
        what += f" ({exp.get('task')}, seq len {exp['seq_len']})"
    return [f"autotune export: {what}", *answer_lines(config), *launch_lines(config)]


def launch_lines(config: dict[str, Any]) -> list[str]:
    """What the exported trial needs beyond `TrainingArguments` and the model-load kwargs, which no
    flag of theirs can say: fp8 from the launcher, the padding multiple from the data collator."""
    lines = []
    if config.get("mixed_precision") == "fp8":
        lines.append(
            "fp8, not a TrainingArguments flag: launch with `accelerate launch --mixed_precision fp8 "
            "--fp8_backend ao` (or ACCELERATE_MIXED_PRECISION=fp8 ACCELERATE_FP8_BACKEND=AO), torchao "
            "installed, bf16 and fp16 left off (either would override it)"
        )
    multiple = config.get("pad_to_multiple_of")
    if multiple:
        lines.append(
            f"data collator, not a TrainingArguments flag: pad_to_multiple_of={multiple} (transformers' "
            "DataCollatorWithPadding / DataCollatorForLanguageModeling take it)"
        )
    return lines


def answer_lines(config: dict[str, Any], *, time_line: bool = True) -> list[str]:
    """The answer of an exported config in words, one line each: its verdict, what it hands back,
    its figures, the alternative, its loss and predicted run, the search's time (with
    `time_line`) and its changes to the training math. The search's end, ``autotune show`` and
    every export format say these same lines."""
    exp = config["expected"]
    which = "the defaults" if exp.get("trial") is None else f"trial {exp['trial']}"
    lines = [f"answer: {exp['verdict']}", f"use: {which} ({describe_params(exp.get('params') or {})})"]
    lines.append(f"expected: {figures_text(exp)}")
    parameters = parameters_text(exp.get("parameters"))
    if parameters:
        lines.append(parameters)
    alternative = exp.get("alternative")
    if alternative:
        lines.append(f"alternative, not handed back: {alternative_text(alternative)}")
    lines += run_lines(exp)
    if exp.get("whole_run"):
        lines.append(f"whole run: {whole_run_text(exp['whole_run'])}")
    if exp.get("whole_run_note"):
        lines.append(f"whole run: {exp['whole_run_note']}")
    if exp.get("aa_text"):
        lines.append(f"instrument (A/A): {exp['aa_text']}; every interval above is the rounds' model's")
    finalists = finalists_time_text(exp.get("finalists_time"))
    if finalists:
        lines.append(finalists)
    spent = describe_time_breakdown(exp.get("search_time"))
    if spent and time_line:
        lines.append(spent)
    changes = exp.get("semantic_changes") or []
    if changes:
        lines.append("changes the training math, compared with the baseline:")
        lines += [f"  {change['text']}" for change in changes]
    else:
        lines.append("training math as the baseline's (precision, optimizer family, effective batch)")
    return lines


def whole_run_text(check: Mapping[str, Any]) -> str:
    """A whole-run check (`autotune.records.WholeRun.to_dict`) in one line: ``peak 702 MiB (train
    650 MiB on 8 samples of 512 tokens, eval 702 MiB on 8 samples, save 611 MiB), 322 MiB under the
    memory cap of 1.00 GiB``, or what failed."""
    record = WholeRun.from_dict(check)
    if record is None:
        return "not checked"
    sizes = {
        "train": f"{record.train_samples} samples" if record.train_samples else "",
        "eval": f"{record.eval_samples} samples" if record.eval_samples else "",
    }
    if record.train_tokens and sizes["train"]:
        sizes["train"] += f" of {record.train_tokens} tokens"
    steps = ", ".join(
        f"{step} {format_bytes(peak)}" + (f" on {sizes[step]}" if sizes.get(step) else "")
        for step, peak in record.step_peaks.items()
    )
    peak = f"peak {format_bytes(record.peak_bytes)} ({steps})" if record.step_peaks else "no step measured"
    if record.fits is not True:
        verdict = "failed" if record.fits is False else "could not run"
        return f"{verdict}: {record.message}; {peak}"
    headroom = record.headroom_bytes
    if headroom is None:
        return f"{peak}, no memory cap"
    return f"{peak}, {format_bytes(headroom)} under the memory cap of {format_bytes(record.cap_bytes)}"


def finalists_time_text(spent: Mapping[str, Any] | None) -> str | None:
    """``finalists: 14.2 s, 15% of the search's 94.0 s: 15 measurements (set-up 4.1 s, ...)``."""
    if not spent:
        return None
    text = f"finalists: {spent['seconds']:.1f} s"
    if spent.get("share") is not None:
        text += f", {100 * spent['share']:.0f}% of the search's {spent['wall_s']:.1f} s"
    if spent.get("measurements"):
        phases = ", ".join(
            f"{name} {spent[key]:.1f} s"
            for key, name in (
                ("setup_s", "set-up"),
                ("compile_s", "compile"),
                ("warmup_s", "warm-up"),
                ("window_s", "windows"),
            )
            if key in spent
        )
        text += f": {spent['measurements']} measurements ({phases})"
    return text


def figures_text(exp: Mapping[str, Any]) -> str:
    """``18,242 tokens/s (re-measured mean, 95% interval ... over 3 rounds), peak 433 MiB, 1.05x
    the baseline (...)``: the figures of an exported answer."""
    tokens = exp.get("tokens_per_s")
    if tokens is None:
        parts = ["throughput not measured"]
    else:
        interval = exp.get("tokens_per_s_interval")
        within = f", 95% interval {interval[0]:,.0f}-{interval[1]:,.0f}" if interval else ""
        source = (
            f"re-measured mean{within} over {exp.get('rounds')} rounds"
            if exp.get("remeasured")
            else f"the search window's, not re-measured{within}"
        )
        parts = [f"{tokens:,.0f} tokens/s ({source})"]
    peak = exp.get("peak_memory_bytes")
    parts.append(f"peak memory {format_bytes(int(peak))}" if peak is not None else "peak memory not measured")
    speedup = exp.get("speedup_over_baseline")
    base = exp.get("baseline_tokens_per_s")
    if exp.get("trial") is None:
        parts.append("the baseline itself")
    elif speedup is not None and base:
        interval = exp.get("speedup_interval")
        within = f", 95% interval {interval[0]:.2f}-{interval[1]:.2f}x" if interval else ""
        parts.append(f"{speedup:.2f}x the baseline{within} (the baseline at {base:,.0f} tokens/s)")
    else:
        parts.append("no baseline measured")
    return ", ".join(parts)


def alternative_text(alternative: Mapping[str, Any]) -> str:
    """The alternative an answer names, in one line."""
    who = "the defaults" if alternative.get("trial") is None else f"trial {alternative['trial']}"
    text = f"{who} ({describe_params(alternative.get('params') or {})})"
    tokens = alternative.get("tokens_per_s")
    if tokens is not None:
        measured = "re-measured mean" if alternative.get("remeasured") else "search window"
        text += f", {tokens:,.0f} tokens/s ({measured})"
    gain = alternative.get("gain_over_answer")
    if gain:
        described = Interval.from_dict(gain)
        text += f", {described.describe()} over {alternative.get('answer_label')}" if described else ""
    changes = alternative.get("semantic_changes") or []
    if changes:
        text += "; changes the training math: " + "; ".join(changes)
    return text


def _comment(config: dict[str, Any]) -> str:
    return "".join(f"# {line}\n" for line in expected_lines(config))


def _plain(config: dict[str, Any]) -> dict[str, Any]:
    plain = {
        "training_args": dict(config["training_args"]),
        "model_kwargs": dict(config["model_kwargs"]),
        "expected": dict(config["expected"]),
    }
    for key in ("data_collator", "mixed_precision", "pad_to_multiple_of"):
        if config.get(key):
            plain[key] = config[key]
    if config.get("peft"):
        plain["peft"] = dict(config["peft"])
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
                "export with --format json or yaml, or change the value in base_args",
                field="base_args",
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
    if config.get("peft"):
        lines.append(
            "peft adapter, not a TrainingArguments flag: model = get_peft_model(model, "
            f"PeftConfig.from_peft_type(**{json.dumps(config['peft'], separators=(',', ':'))}))"
        )
    return lines


def accelerate_dict(config: dict[str, Any]) -> dict[str, Any]:
    """The accelerate config (``accelerate launch --config_file``) for the exported trial."""
    args = config["training_args"]
    mixed = config.get("mixed_precision") or (
        "bf16" if args.get("bf16") else "fp16" if args.get("fp16") else "no"
    )
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
    if mixed == "fp8":
        out["fp8_config"] = {"backend": "AO"}  # torchao's float8, as the trial trained
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
    if config.get("peft"):
        lines += [
            "",
            "from peft import get_peft_model, PeftConfig",
            "",
            f"peft_config = PeftConfig.from_peft_type(**{_py(config['peft'])})",
            "model = get_peft_model(model, peft_config)",
        ]
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
