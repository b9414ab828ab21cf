"""The exported answer in words: what it expects, what it needs at launch, its whole-run check
and where the finalists' time went; the lines the CLI, the report and the comment headers of the
formats print.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.answer.model import Interval
from autotune.export.config import parameters_text
from autotune.progress import describe_params, describe_time_breakdown, format_bytes
from autotune.records import WholeRun
from autotune.store.objective import run_lines

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
