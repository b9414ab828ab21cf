"""`RunConfig`: everything a search needs, each field a run option; what the CLI flags, environment
and Python callers fill in, stored with the study (`to_dict`, `from_dict`)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from autotune.errors import UsageError
from autotune.options.checks import (
    check_backend,
    check_execution,
    check_run_length,
    check_workload,
    tracker_names,
)
from autotune.options.declare import option, resolve_aliases
from autotune.options.settings import MeasureSettings
from autotune.options.sizes import MemoryCap, parse_memory_cap
from autotune.schema import SCHEMA_VERSION, autotune_version, check_schema

DEFAULT_STORAGE = "sqlite:///autotune.db"
STORAGE_ENV = "AUTOTUNE_STORAGE"
SCHEMA_KEY = "schema"  # the run configuration's `autotune.schema.SCHEMA_VERSION`
VERSION_KEY = "autotune_version"


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
        help="Pad each batch of per-batch padded data (classification, packing examples) to a multiple "
        "of this: the baseline's batches, and every trial's where the pad_to_multiple_of knob is not "
        "searched (a searched knob sets its own trials' multiple).",
        group="workload",
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
    report_to: tuple[str, ...] = option(
        (),
        help="Log the search to these trackers, as the Trainer's report_to names them: tensorboard, "
        "mlflow, wandb (repeatable, or comma-separated; from Python a name or a list; none: no "
        "tracker). Each trial's knobs, throughput, peak memory and outcome, and the answer; the "
        "trials' own training stays untracked.",
        group="tracking",
        default_text="none",
    )
    tracker_dir: str | None = option(
        help="The folder TensorBoard's event files go under, one folder per study in it.",
        group="tracking",
        default_text="runs",
    )

    def __post_init__(self) -> None:
        # "wandb,mlflow", ["wandb"], "none": the tuple of tracker names (a usage error names a bad one)
        object.__setattr__(self, "report_to", tracker_names(self.report_to))
        check_workload(self)
        check_run_length(self)
        check_execution(self)
        check_backend(self)
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
        wrote it; the store keeps its local paths absolute (`autotune.plan.paths.stored_run_config`)."""
        data = asdict(self)
        # Stored with the study and shown by `studies`/`show`: never the password. Whoever
        # continues a study passes its own --storage (resume, worker).
        data["storage"] = self.storage_display
        data["allow_mismatch"] = list(self.allow_mismatch)
        data[SCHEMA_KEY] = SCHEMA_VERSION
        data[VERSION_KEY] = autotune_version()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> RunConfig:
        """Rebuild a stored run configuration (``autotune resume``, a pool member), with `overrides`
        on top. An older configuration (an older schema, or none recorded) is read with defaults
        for the keys it lacks, and its options' old names (`autotune.options.declare.ALIASES`:
        ``max_steps`` for ``measure_steps``) as the new ones; keys this autotune does not know are
        ignored (a key an older schema had and this one dropped).

        Raises:
            UsageError: the configuration was written with a newer schema than this autotune reads
                (its values could mean what this version cannot do): upgrade autotune here.
        """
        check_schema("the study's run configuration", data.get(SCHEMA_KEY, 1), data.get(VERSION_KEY))
        fields = {**data, **{k: v for k, v in overrides.items() if v is not None}}
        if isinstance(fields.get("measure"), dict):
            known_measure = set(MeasureSettings.__dataclass_fields__)
            measure = dict(fields["measure"])
            resolve_aliases(measure, known_measure, warn=None)  # stored under the old names
            fields["measure"] = MeasureSettings(**{k: v for k, v in measure.items() if k in known_measure})
        fields["allow_mismatch"] = tuple(fields.get("allow_mismatch") or ())
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in fields.items() if k in known})
