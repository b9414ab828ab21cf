"""The typed run configuration: what the CLI flags, environment and Python callers fill in."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from autotune.errors import UsageError
from autotune.files import read_mapping
from autotune.schema import SCHEMA_VERSION, autotune_version, check_schema

DEFAULT_STORAGE = "sqlite:///autotune.db"
STORAGE_ENV = "AUTOTUNE_STORAGE"

_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


@dataclass(frozen=True)
class MemoryCap:
    """A memory cap: an absolute size, or a fraction of the device's memory.

    Attributes:
        kind: ``"bytes"`` or ``"fraction"``.
        value: bytes for ``"bytes"``; a number in (0, 1] for ``"fraction"``.
        text: what the user wrote, for messages and the store.
    """

    kind: Literal["bytes", "fraction"]
    value: float
    text: str

    def resolve(self, device_total_bytes: int) -> int:
        """The cap in bytes on a device with `device_total_bytes` of memory."""
        if self.kind == "bytes":
            return int(self.value)
        return int(self.value * device_total_bytes)


def cap_bytes(text: str | None, device_memory_bytes: int, *, study: str | None = None) -> int | None:
    """A memory cap as written (``20GiB``, ``90%``; None: no cap) in bytes on a device of
    `device_memory_bytes`: the one place a cap becomes bytes. For a stored `study` (its name), a
    fraction needs the device memory the study recorded.

    Raises:
        UsageError: not a cap, or a fraction and the study does not record its device's memory.
    """
    if text is None:
        return None
    cap = parse_memory_cap(text)
    if study is not None and cap.kind == "fraction" and device_memory_bytes <= 0:
        raise UsageError(
            f"memory_cap={text!r}: study {study!r} does not record its device's memory",
            "give the cap as a size, like 20GiB",
            field="memory_cap",
        )
    return cap.resolve(device_memory_bytes)


def parse_memory_cap(text: str) -> MemoryCap:
    """Parse ``20GiB``, ``20GB``, ``20000MiB``, ``90%`` or ``0.9`` (a fraction of the device).

    Raises:
        UsageError: the text is not one of those forms.
    """
    raw = text.strip()
    hint = "write a size like 20GiB, 20GB or 20000MiB, or a share of the device like 90% or 0.9"
    if raw.endswith("%"):
        try:
            percent = float(raw[:-1])
        except ValueError:
            raise UsageError(f"invalid memory cap {text!r}", hint) from None
        if not 0 < percent <= 100:
            raise UsageError(f"invalid memory cap {text!r}: a percentage must be in (0, 100]", hint)
        return MemoryCap("fraction", percent / 100, raw)
    match = _SIZE.match(raw)
    if match is None:
        raise UsageError(f"invalid memory cap {text!r}", hint)
    number, unit = float(match.group(1)), match.group(2).lower()
    if not unit:
        if 0 < number <= 1:
            return MemoryCap("fraction", number, raw)
        raise UsageError(f"invalid memory cap {text!r}: a bare number is a fraction in (0, 1]", hint)
    if unit not in _UNITS:
        raise UsageError(f"invalid memory cap {text!r}: unknown unit {match.group(2)!r}", hint)
    size = number * _UNITS[unit]
    if size < 1:
        raise UsageError(f"invalid memory cap {text!r}: must be positive", hint)
    return MemoryCap("bytes", size, raw)


# The groups of run options, in the order they are shown: the panels of `autotune search --help`
# and the sections of docs/reference/options.md.
GROUPS = {
    "workload": "The workload: what is trained",
    "execution": "Where trials run",
    "measurement": "How a trial is measured",
    "choice": "How the answer is chosen",
    "store": "The store",
}


def option(
    default: Any = None,
    *,
    help: str,
    group: str,
    flag: str | None = "",
    short: str | None = None,
    negative: str | None = None,
    envvar: str | None = None,
    default_text: str | None = None,
) -> Any:
    """Declare a run option once, as a field of `RunConfig` or `MeasureSettings`: its default, its
    help and group, and its command-line flag in the field's metadata (as transformers'
    `HfArgumentParser` reads them). `autotune.options` derives the ``autotune search`` flags, the
    keywords of `search()` and `tune()` and docs/reference/options.md from these fields.

    Args:
        default: the value when the option is not given (immutable: a tuple, not a list).
        help: what the option does, for ``--help`` and the reference; ``{name}`` mentions another
            option (shown as its flag on the command line).
        group: a key of `GROUPS`.
        flag: its long flag; ``""``: ``--`` and the field's name with dashes; None: the command
            line does not offer it (Python callers only).
        short: a one-letter alias (``-n``).
        negative: a boolean's off switch (``--no-baseline``), where its default is on.
        envvar: an environment variable the command line reads where the flag is not given.
        default_text: how a default that is computed later reads (``the preset's``).
    """
    if group not in GROUPS:
        raise ValueError(f"unknown option group {group!r}")
    metadata = {
        "help": help,
        "group": group,
        "flag": flag,
        "short": short,
        "negative": negative,
        "envvar": envvar,
        "default_text": default_text,
    }
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class MeasureSettings:
    """How one trial is measured (DESIGN.md, "Measurement protocol"). Each field is a run option
    declared with its help (docs/reference/options.md)."""

    warmup_steps: int = option(
        3,
        help="Optimizer steps always run before the measured window and never scored; warm-up goes on "
        "while step times still fall (compilation), up to {max_warmup_steps}.",
        group="measurement",
    )
    max_warmup_steps: int = option(
        20,
        help="Warm-up goes on while step times still fall (compilation) up to this many steps; where "
        "not given, raised to {warmup_steps}.",
        group="measurement",
        flag=None,
    )
    eager_warmup_steps: int | None = option(
        None,
        help="Where given, the warm-up of a configuration that compiles nothing is this many steps, "
        "whatever their times (a finalists' round: 2, the search has seen the configuration "
        "settle); not given: as any other's, {warmup_steps} and more while step times fall.",
        group="measurement",
        flag=None,
    )
    min_steps: int = option(
        5,
        help="Measured steps before the stability rule may end the window; where not given, lowered "
        "to {max_steps}.",
        group="measurement",
        flag=None,
    )
    max_steps: int = option(
        30,
        help="The measured window ends after this many optimizer steps at the latest.",
        group="measurement",
    )
    max_seconds: float = option(
        60.0, help="... or after this many seconds of measured window.", group="measurement"
    )
    target_rel_ci: float = option(
        0.03,
        help="... or as soon as the 95% confidence half-width of tokens/s is below this fraction of it.",
        group="measurement",
        flag="--target-ci",
    )
    trial_timeout_s: float = option(
        900.0,
        help="Seconds a trial may train (warm-up included) before it ends with reason timeout at its "
        "next step.",
        group="measurement",
        flag="--trial-timeout",
    )
    screen_ratio: float = option(
        0.5,
        help="Screening: a search trial whose fastest step, from its second step on (a compiled "
        "trial: once its minimum warm-up is done), runs under this fraction of the best tokens/s "
        "the study has measured (its trials and its baseline) stops there, reason screened_out, "
        "instead of taking its full window; with {train_tokens} or {train_steps}, one whose run "
        "at that speed (its set-up at the least measured, no compilation) is predicted to take "
        "longer than the best predicted run divided by this fraction. A machine probe confirms "
        "the verdict first: where the machine runs slower than when the best was measured, the "
        "trial is judged that much faster (up to 4x). 0: every trial gets its full window (the promotion "
        "line is off too).",
        group="measurement",
    )
    promote_ratio: float = option(
        0.8,
        help="The promotion line: a search trial's window that, after {min_steps} steps, measures it "
        "clearly under this fraction of the study's best (the upper end of its 95% interval is) "
        "ends there: the trial keeps its figure, less precise, and does not earn the rest of its "
        "window; 0: every trial that passed screening gets its full window.",
        group="measurement",
    )

    def __post_init__(self) -> None:
        if not 0 <= self.screen_ratio < 1:
            raise UsageError(
                f"screen_ratio must be in [0, 1), got {self.screen_ratio}",
                "use 0.5 (stop trials under half the best throughput) or 0 (no screening)",
                field="screen_ratio",
            )
        if not 0 <= self.promote_ratio < 1:
            raise UsageError(
                f"promote_ratio must be in [0, 1), got {self.promote_ratio}",
                "use 0.8 (end the windows of trials clearly under 0.8x the best) or 0 (full windows)",
                field="promote_ratio",
            )
        if self.trial_timeout_s <= 0:
            raise UsageError(
                f"trial_timeout_s must be positive, got {self.trial_timeout_s}", field="trial_timeout_s"
            )
        if self.eager_warmup_steps is not None and self.eager_warmup_steps < 1:
            raise UsageError(
                f"eager_warmup_steps must be >= 1, got {self.eager_warmup_steps}", field="eager_warmup_steps"
            )
        if self.warmup_steps < 1:
            raise UsageError(f"warmup_steps must be >= 1, got {self.warmup_steps}", field="warmup_steps")
        if self.max_warmup_steps < self.warmup_steps:
            raise UsageError(
                f"max_warmup_steps must be >= warmup_steps, got {self.max_warmup_steps} and "
                f"{self.warmup_steps}",
                field=("max_warmup_steps", "warmup_steps"),
            )
        if self.max_steps < 2:
            raise UsageError(
                f"max_steps must be at least 2, got {self.max_steps}",
                "a confidence interval needs two measured steps",
                field="max_steps",
            )
        if not 2 <= self.min_steps <= self.max_steps:
            raise UsageError(
                f"need 2 <= min_steps <= max_steps, got min_steps={self.min_steps}, "
                f"max_steps={self.max_steps}",
                field=("min_steps", "max_steps"),
            )
        for name in ("max_seconds", "target_rel_ci"):
            if not getattr(self, name) > 0:
                raise UsageError(f"{name} must be positive, got {getattr(self, name)}", field=name)

    @property
    def step_budget(self) -> int:
        """The `max_steps` given to the Trainer: the window always ends before it."""
        return self.max_warmup_steps + self.max_steps + 1


@dataclass(frozen=True)
class RunConfig:
    """Everything a search needs; the CLI builds one from flags, Python callers directly.

    Each field is a run option declared once with its help, group and flag (`option`; the list is
    docs/reference/options.md), but `measure`, whose fields are options of their own.
    """

    model: str = option(
        "tiny-gpt2",
        help="A built-in preset (tiny-gpt2, tiny-llama, ...), a local model directory, or a hub id "
        "(needs network).",
        group="workload",
        short="-m",
    )
    space: str = option(
        "quick",
        help="A shipped search space (quick, cpu, default) or the path of a YAML space.",
        group="choice",
        short="-s",
    )
    trials: int = option(
        8,
        help="The study's total budget of measured trials: with 20 stored, 30 runs 10 more. Trials "
        "skipped because a combination cannot run here cost milliseconds and do not count.",
        group="choice",
        short="-n",
    )
    storage: str | None = option(
        help=f"The study store, an optuna RDB URL (also {STORAGE_ENV}); PostgreSQL or MySQL for "
        "pools of workers on several hosts.",
        group="store",
        envvar=STORAGE_ENV,
        default_text=DEFAULT_STORAGE,
    )
    study: str | None = option(
        help="The study name; running again with the same name continues the study.",
        group="store",
        default_text="MODEL-SPACE-seqLEN",
    )
    seq_len: int | None = option(help="Tokens per sample.", group="workload", default_text="the preset's")
    memory_cap: str | None = option(
        help="Peak memory cap: 20GiB, 20GB, 20000MiB, 90% or 0.9 of the device (of the machine's RAM "
        "on CPU): a trial whose measured peak is over it is infeasible.",
        group="choice",
        default_text="none",
    )
    seed: int = option(0, help="Seeds the sampler and the model initialisation.", group="choice")
    output_dir: str | None = option(
        help="The folder under which trials make their scratch folders (nothing is saved there).",
        group="execution",
        flag=None,
        default_text="the system's temporary folder",
    )
    measure: MeasureSettings = field(default_factory=MeasureSettings, metadata={"group": "measurement"})
    global_batch_size: int | None = option(
        help="Only try splits with per-device batch x accumulation x processes = this; an unreachable "
        "size is an error before any trial.",
        group="choice",
        default_text="free",
    )
    keep_semantics: bool = option(
        False,
        help="Hold what changes the training math at the base config (precision, optimizer family, "
        "effective batch) and search only speed knobs.",
        group="choice",
    )
    base_args: str | None = option(
        help="A JSON or YAML file of TrainingArguments kwargs (learning rate, precision, batch, ...) "
        "every trial starts from.",
        group="workload",
        default_text="none",
    )
    finalists: int = option(
        3,
        help="How many of the best feasible trials are re-measured before the winner is declared "
        "(0 or 1: none).",
        group="choice",
    )
    finalist_rounds: int = option(
        2,
        help="Interleaved re-measurement rounds of the finalists, each in a rotated order, the "
        "baseline twice in each; then more rounds for the contestants of a question still open, "
        "while the finalists' budget (30% of the search) could answer it.",
        group="choice",
    )
    allow_mismatch: tuple[str, ...] = option(
        (),
        help="A fingerprint field allowed to differ when continuing a stored study (repeatable).",
        group="store",
        default_text="none",
    )
    measure_baseline: bool = option(
        True,
        help="Measure the base config (or the Transformers defaults) once, before a new study's first "
        "trial, to state the speedup against it.",
        group="choice",
        flag="--baseline",
        negative="--no-baseline",
    )
    isolation: Literal["process", "none"] = option(
        "process",
        help="process: every trial, the baseline and every re-measurement in a fresh worker process; "
        "none: all in this process (debugging).",
        group="execution",
    )
    workers: int | None = option(
        help="Worker processes measuring trials at once (each its own GPU, or its share of the CPU cores).",
        group="execution",
        short="-w",
        default_text="one per visible GPU, or one on CPU",
    )
    nproc_per_node: int = option(
        1,
        help="Processes per trial: above 1, each trial is a fresh torchrun group of this many DDP "
        "processes (rank 0 asks the study, every rank applies its values).",
        group="execution",
    )
    ddp_timeout_s: float = option(
        300.0,
        help="Seconds a DDP collective may wait before a desynchronised group fails (on CPU too).",
        group="execution",
        flag="--ddp-timeout",
    )
    backend: Literal["optuna", "ray"] = option(
        "optuna",
        help="optuna: trials in autotune's worker processes; ray: trials in Ray Tune actors, through "
        "the Trainer's hyperparameter_search with its ray backend.",
        group="execution",
    )
    ray_address: str | None = option(
        help="With {backend='ray'}: the Ray cluster to join (HOST:PORT or ray://HOST:10001).",
        group="execution",
        default_text="a local Ray instance for the search",
    )
    task: str | None = option(
        help="causal-lm, masked-lm or seq-classification.", group="workload", default_text="the model's"
    )
    pretrained: bool = option(
        False,
        help="Load the model's real weights (default: random weights built from its config).",
        group="workload",
    )
    trust_remote_code: bool = option(
        False, help="Allow code from the model's hub repository.", group="workload"
    )
    dataset: str | None = option(
        help="A local text, JSON lines, CSV or Parquet file or folder, or a hub dataset.",
        group="workload",
        default_text="synthetic tokens",
    )
    dataset_config: str | None = option(help="The hub dataset's configuration name.", group="workload")
    split: str = option("train", help="The dataset split to train on.", group="workload")
    text_column: str | None = option(
        help="The column holding the text.",
        group="workload",
        default_text="text, else the first string column",
    )
    tokenizer: str | None = option(
        help="A tokenizer folder or hub id for the dataset.", group="workload", default_text="the model's"
    )
    pad_to_multiple_of: int | None = option(
        help="Pad classification batches to a multiple of this.", group="workload"
    )
    packing: str = option(
        "blocks",
        help="How language-model text becomes samples: blocks concatenates it and cuts {seq_len} blocks "
        "(every token real, as run_clm.py does); examples keeps each text as one sample, truncated "
        "to {seq_len} and padded per batch (fine-tuning and chat data), where the padding_free and "
        "group_by_length knobs apply.",
        group="workload",
    )
    peft: str | None = option(
        help="Train a PEFT adapter instead of every weight: lora (peft's LoraConfig with its defaults "
        "for the architecture, target modules inferred) or a JSON/YAML file of a peft config's "
        "fields (peft_type picks the class, LORA by default). Each trial applies it to the model as "
        "built; the memory estimate counts gradients and optimizer states for the adapter's "
        "parameters only.",
        group="workload",
        default_text="none (every weight trained)",
    )
    compile_cache: str | None = option(
        help="The folder every trial process of the study compiles into (inductor's and Triton's "
        "caches): a configuration compiles cold once for all workers, the finalists and a resume; "
        "shared storage for pools on several hosts.",
        group="execution",
        default_text="next to a SQLite store's file, else ~/.cache/autotune/compile-cache/STUDY",
    )
    loss_tolerance: float = option(
        0.05,
        help="A trial whose loss at equal tokens is worse than the baseline's by more than this "
        "fraction, beyond the noise of its paired steps, is infeasible, reason loss_diverged; "
        "trials that change the effective batch or the data order are not judged.",
        group="choice",
    )
    train_tokens: int | None = option(
        help="The length of your whole run in tokens: trials are then chosen by its predicted wall "
        "time (set-up + compilation + tokens / throughput), not by throughput.",
        group="choice",
        default_text="none",
    )
    train_steps: int | None = option(
        help="The same in optimizer steps of the baseline's batch (its measured tokens per step; needs "
        "the baseline).",
        group="choice",
        default_text="none",
    )
    price_per_hour: float | None = option(
        help="The price of an hour of this machine: with a run length, the answer and the export "
        "state its cost.",
        group="choice",
        default_text="none",
    )
    # The whole-run check (`autotune.driver.wholerun`): its options together.
    whole_run_check: bool = option(
        True,
        help="Before the answer is final, run the winner and the defaults once each as a whole run "
        "does, in a fresh worker under the memory cap: an optimizer step on the longest batch of the "
        "data, an evaluation step and a checkpoint save. A winner over the cap falls to the next "
        "finalist; the answer states the whole-run peak and its headroom under the cap.",
        group="choice",
        flag="--whole-run-check",
        negative="--no-whole-run-check",
    )
    eval_batch_size: int | None = option(
        help="The per-device batch of the whole-run check's evaluation step.",
        group="choice",
        default_text="the configuration's train batch",
    )

    def __post_init__(self) -> None:
        self._check_workload()
        self._check_run_length()
        self._check_execution()
        self._check_backend()
        for name, least in (("finalists", 0), ("finalist_rounds", 1), ("trials", 1)):
            if getattr(self, name) < least:
                raise UsageError(f"{name} must be at least {least}, got {getattr(self, name)}", field=name)
        if self.global_batch_size is not None and self.global_batch_size < 1:
            raise UsageError(
                f"global_batch_size must be at least 1, got {self.global_batch_size}",
                field="global_batch_size",
            )
        if self.keep_semantics and self.global_batch_size is not None:
            raise UsageError(
                "keep_semantics already holds the global batch at the base config's",
                "drop global_batch_size, or set the batch in base_args",
                field=("keep_semantics", "global_batch_size", "base_args"),
            )
        if self.seq_len is not None and self.seq_len < 2:
            raise UsageError(f"seq_len must be at least 2, got {self.seq_len}", field="seq_len")
        if self.memory_cap is not None:
            try:
                parse_memory_cap(self.memory_cap)
            except UsageError as exc:
                raise UsageError(exc.message, exc.hint, field="memory_cap") from None

    def _check_execution(self) -> None:
        if self.isolation not in ("process", "none"):
            raise UsageError(
                f"isolation must be 'process' or 'none', got {self.isolation!r}", field="isolation"
            )
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"workers must be at least 1, got {self.workers}", field="workers")
        if self.nproc_per_node < 1:
            raise UsageError(
                f"nproc_per_node must be at least 1, got {self.nproc_per_node}", field="nproc_per_node"
            )
        if self.ddp_timeout_s <= 0:
            raise UsageError(
                f"ddp_timeout_s must be positive, got {self.ddp_timeout_s}", field="ddp_timeout_s"
            )
        if self.nproc_per_node > 1 and (self.isolation == "none" or self.workers not in (None, 1)):
            raise UsageError(
                f"nproc_per_node={self.nproc_per_node} runs each trial as its own torchrun group",
                "drop isolation='none' and workers",
                field=("nproc_per_node", "isolation", "workers"),
            )
        if self.workers not in (None, 1) and self.isolation == "none":
            raise UsageError(
                f"workers={self.workers} needs worker processes",
                "drop isolation='none', or workers",
                field=("workers", "isolation"),
            )

    def _check_run_length(self) -> None:
        if not self.loss_tolerance > 0:
            raise UsageError(
                f"loss_tolerance must be positive, got {self.loss_tolerance}", field="loss_tolerance"
            )
        if self.train_tokens is not None and self.train_steps is not None:
            raise UsageError(
                "give train_tokens or train_steps, not both",
                "drop one of them",
                field=("train_tokens", "train_steps"),
            )
        for name in ("train_tokens", "train_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"{name} must be at least 1, got {value}", field=name)
        if self.train_steps is not None and not self.measure_baseline:
            raise UsageError(
                "train_steps counts steps of the baseline's batch, which measure_baseline=False does "
                "not measure",
                "drop measure_baseline=False, or give train_tokens",
                field=("train_steps", "measure_baseline", "train_tokens"),
            )
        if self.price_per_hour is not None and not self.price_per_hour > 0:
            raise UsageError(
                f"price_per_hour must be positive, got {self.price_per_hour}", field="price_per_hour"
            )
        if self.eval_batch_size is not None and self.eval_batch_size < 1:
            raise UsageError(
                f"eval_batch_size must be at least 1, got {self.eval_batch_size}", field="eval_batch_size"
            )

    def _check_backend(self) -> None:
        if self.backend not in ("optuna", "ray"):
            raise UsageError(f"backend must be 'optuna' or 'ray', got {self.backend!r}", field="backend")
        if self.backend != "ray":
            if self.ray_address is not None:
                raise UsageError(
                    "ray_address only applies with backend='ray'",
                    "add backend='ray'",
                    field=("ray_address", "backend"),
                )
            return
        if self.isolation == "none":
            raise UsageError(
                "backend='ray' runs trials in Ray actors, not in this process",
                "drop isolation='none', or backend='ray'",
                field=("backend", "isolation"),
            )
        if self.workers is not None:
            raise UsageError(
                f"workers={self.workers} does not apply with backend='ray': Ray runs one trial per GPU "
                "(or per CPU machine)",
                "drop workers",
                field=("workers", "backend"),
            )
        if self.nproc_per_node > 1:
            raise UsageError(
                "nproc_per_node runs trials as torchrun groups, not Ray actors",
                "drop nproc_per_node, or backend='ray'",
                field=("nproc_per_node", "backend"),
            )

    def _check_workload(self) -> None:
        if self.task is not None and self.task not in ("causal-lm", "masked-lm", "seq-classification"):
            raise UsageError(
                f"unknown task {self.task!r}", "use causal-lm, masked-lm or seq-classification", field="task"
            )
        if self.pad_to_multiple_of is not None and self.pad_to_multiple_of < 1:
            raise UsageError(
                f"pad_to_multiple_of must be at least 1, got {self.pad_to_multiple_of}",
                field="pad_to_multiple_of",
            )
        if self.packing not in ("blocks", "examples"):
            raise UsageError(
                f"unknown packing {self.packing!r}", "use 'blocks' or 'examples'", field="packing"
            )
        if self.packing == "examples" and self.task == "seq-classification":
            raise UsageError(
                "packing='examples' applies to language-model text; classification samples are always "
                "one text each",
                "drop packing",
                field="packing",
            )
        given = [
            name
            for name, value in (
                ("dataset_config", self.dataset_config),
                ("text_column", self.text_column),
                ("tokenizer", self.tokenizer),
                ("pad_to_multiple_of", self.pad_to_multiple_of),
                ("packing", None if self.packing == "blocks" else self.packing),
            )
            if value is not None
        ]
        if given and self.dataset is None:
            raise UsageError(
                f"{given[0]} only applies with dataset",
                "give dataset (a file, a folder or a hub id)",
                field=(given[0], "dataset"),
            )

    @property
    def storage_url(self) -> str:
        return self.storage or os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE

    @property
    def storage_display(self) -> str:
        """The storage URL as it may be printed or stored: its password hidden."""
        from autotune.urls import display_url  # SQLAlchemy: not for `autotune --help`

        return display_url(self.storage_url)

    @property
    def memory_cap_parsed(self) -> MemoryCap | None:
        return parse_memory_cap(self.memory_cap) if self.memory_cap else None

    def to_dict(self) -> dict[str, Any]:
        """The configuration as stored with its study: what `from_dict` reads back, on this host or
        on a pool member started anywhere else. It records the schema and autotune versions that
        wrote it; local paths (model, dataset, tokenizer, base config, space file) are absolute."""
        data = asdict(self)
        # Stored with the study and shown by `studies`/`show`: never the password. Whoever
        # continues a study passes its own --storage (resume, worker).
        data["storage"] = self.storage_display
        data["allow_mismatch"] = list(self.allow_mismatch)
        data.update(stored_paths(self))
        data[SCHEMA_KEY] = SCHEMA_VERSION
        data[VERSION_KEY] = autotune_version()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> RunConfig:
        """Rebuild a stored run configuration (``autotune resume``, a pool member), with `overrides`
        on top. An older configuration (an older schema, or none recorded) is read with defaults
        for the keys it lacks; keys this autotune does not know are ignored (a key an older schema
        had and this one dropped).

        Raises:
            UsageError: the configuration was written with a newer schema than this autotune reads
                (its values could mean what this version cannot do): upgrade autotune here.
        """
        check_schema("the study's run configuration", data.get(SCHEMA_KEY, 1), data.get(VERSION_KEY))
        fields = {**data, **{k: v for k, v in overrides.items() if v is not None}}
        if isinstance(fields.get("measure"), dict):
            known_measure = set(MeasureSettings.__dataclass_fields__)
            fields["measure"] = MeasureSettings(
                **{k: v for k, v in fields["measure"].items() if k in known_measure}
            )
        fields["allow_mismatch"] = tuple(fields.get("allow_mismatch") or ())
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in fields.items() if k in known})


SCHEMA_KEY = "schema"  # the run configuration's `autotune.schema.SCHEMA_VERSION`
VERSION_KEY = "autotune_version"


def _absolute(path: str | None) -> str | None:
    """`path` made absolute where it names something on this machine; else as given (a hub id)."""
    if path is None:
        return None
    local = os.path.expanduser(path)
    return os.path.abspath(local) if os.path.exists(local) else path


def _absolute_folder(path: str | None) -> str | None:
    return os.path.abspath(os.path.expanduser(path)) if path else None


def stored_paths(config: RunConfig) -> dict[str, str | None]:
    """The configuration's local paths as stored: absolute, so that a pool member started in any
    folder finds them. Hub ids, shipped space names and model presets are kept as given (a preset
    or shipped space wins over a local file of that name, as when they are loaded)."""
    paths = {
        "dataset": _absolute(config.dataset),
        "tokenizer": _absolute(config.tokenizer),
        "base_args": _absolute(config.base_args),
        # ``lora`` is a name, not a file (even where a file of that name lies in this folder)
        "peft": config.peft
        if config.peft is None or config.peft.strip().lower() == "lora"
        else _absolute(config.peft),
        # A folder that may not exist yet: absolute all the same (a pool member's is the same one).
        "compile_cache": _absolute_folder(config.compile_cache),
        "model": config.model,
        "space": config.space,
    }
    if _absolute(config.model) != config.model:
        from autotune.workloads.workload import PRESETS  # imports torch: only for a local path

        if config.model not in PRESETS:
            paths["model"] = _absolute(config.model)
    if _absolute(config.space) != config.space:
        from autotune.space.loading import builtin_spaces

        if config.space not in builtin_spaces():
            paths["space"] = _absolute(config.space)
    return paths


def refuse_stored_remote_code(stored: dict[str, Any], allowed: bool) -> None:
    """Refuse to run code that a stored run configuration asks for: a pool member takes its run
    configuration from the store, and whoever can write the store must not choose code for it.
    ``trust_remote_code`` (the model's, the tokenizer's and the dataset's own Python from the hub)
    runs only where this worker's own command line said ``--trust-remote-code`` (`allowed`).

    Raises:
        UsageError: the stored configuration asks for remote code and `allowed` is False.
    """
    if stored.get("trust_remote_code") and not allowed:
        raise UsageError(
            f"the study's run configuration runs code from the hub repository of {stored.get('model')!r} "
            "(trust_remote_code=True), which this worker was not allowed to run",
            "read that code, then start the worker with trust_remote_code=True",
            field="trust_remote_code",
        )


# TrainingArguments fields a search controls itself: a base config may not set them.
_RESERVED_ARGS = (
    "output_dir",
    "max_steps",
    "num_train_epochs",
    "report_to",
    "save_strategy",
    "eval_strategy",
    "logging_strategy",
    "do_eval",
    "push_to_hub",
    "load_best_model_at_end",
)


def load_base_args(path: str) -> dict[str, Any]:
    """Read a base config: a JSON or YAML mapping of `TrainingArguments` kwargs.

    Raises:
        UsageError: unreadable file, not a mapping, an unknown field, or a field the search controls.
    """
    import dataclasses

    from transformers import TrainingArguments

    data = read_mapping(path, "base_args", "TrainingArguments fields", "pass a JSON or YAML file")
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    for key in data:
        if key not in fields:
            raise UsageError(
                f"base_args {path}: {key!r} is not a TrainingArguments field",
                "see `python -c 'import transformers; help(transformers.TrainingArguments)'`",
                field="base_args",
            )
        if key in _RESERVED_ARGS:
            raise UsageError(
                f"base_args {path}: {key!r} is set by the search itself", f"remove {key}", field="base_args"
            )
    return dict(data)
