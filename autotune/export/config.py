"""A study's answer as a config to paste into a real run (`export_config`).

Pure: no torch or transformers import at module top (`TrainingArguments` defaults are read lazily,
when a config is built). Everything comes from the store: no trial is run again. `export_config`
turns the answer into ``{"training_args", "model_kwargs", "expected"}``, which the renderers of
`autotune.export.formats` and `autotune.export.launchers` write out.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from autotune.answer.choices import measured_in_full, search_choice
from autotune.answer.model import BEATS_DEFAULTS, CHOSEN, KEEPS_MATH, Answer
from autotune.errors import UsageError
from autotune.options import cap_bytes
from autotune.plan.base_args import current_names
from autotune.progress import format_bytes
from autotune.records import TrialRecord, read_study
from autotune.space.defaults import training_args_defaults
from autotune.space.mapping import fp8_trial
from autotune.store.objective import defaults_run_facts
from autotune.store.semantics import study_changes
from autotune.store.session import StudyStore
from autotune.store.trials import read_trials, trial_run_facts

# Always exported, even at their TrainingArguments default: the batch split defines the run.
_ALWAYS = ("per_device_train_batch_size", "gradient_accumulation_steps", "optim")
# Precision flags are exported when on (off is their default and says nothing).
_PRECISION_FLAGS = ("bf16", "fp16")
# Fields whose None default is turned into this value by TrainingArguments.__post_init__.
_EFFECTIVE_DEFAULTS: dict[str, Any] = {"activation_checkpointing": False, "gradient_checkpointing": False}


# -- the answer's config -----------------------------------------------------------------------


def resolve_cap(study: StudyStore, text: str) -> int:
    """``--memory-cap`` text in bytes: a fraction (``90%``) is of the device the study ran on.

    Raises:
        UsageError: not a cap, or a fraction and the study does not record its device's memory.
    """
    capped = cap_bytes(text, read_study(study).device_memory_bytes, study=study.study_name)
    assert capped is not None  # `text` is a cap
    return capped


def no_answer_error(study: StudyStore, answer: Answer, cap_text: str | None = None) -> UsageError:
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


def _search_command(study: StudyStore, cap: str | None = None) -> str:
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
    study: StudyStore, answer: Answer | TrialRecord, *, cap_text: str | None = None
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
    # a store may hold a base config as given, its aliases not yet renamed
    training_args = _minimal_args({**current_names(record.base_args), **choice.training_args})
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
