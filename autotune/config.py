"""The typed run configuration: what the CLI flags, environment and Python callers fill in."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from autotune.errors import UsageError

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


@dataclass(frozen=True)
class MeasureSettings:
    """How one trial is measured (DESIGN.md, "Measurement protocol").

    Attributes:
        warmup_steps: optimizer steps always run before the measured window and never scored.
        max_warmup_steps: warm-up goes on while step times still fall (compilation) up to this.
        min_steps: measured steps before the stability rule may end the window.
        max_steps: the measured window ends after this many optimizer steps at the latest.
        max_seconds: ... or after this many seconds of measured window.
        target_rel_ci: the window ends once the 95% confidence half-width of the throughput,
            relative to its mean, is below this.
        trial_timeout_s: a trial still training after this many seconds (warm-up included) ends
            with reason ``timeout`` at its next step.
        screen_ratio: screening: a search trial whose fastest step so far, from its second step
            on (a compiled trial: once its minimum warm-up is done), runs at less than this
            fraction of the best throughput the study has measured (its trials and its baseline)
            stops there with reason ``screened_out`` instead of taking its full window; 0 turns
            screening off, the promotion line too: every trial gets its full window.
        promote_ratio: the promotion line: a search trial's window that, after `min_steps`
            steps, measures it clearly under this fraction of the study's best (the upper end of
            its 95% interval is) ends there: the trial is measured, less precisely, and does not
            earn the rest of its window; 0 gives every trial that passed screening its window.
    """

    warmup_steps: int = 3
    max_warmup_steps: int = 20
    min_steps: int = 5
    max_steps: int = 30
    max_seconds: float = 60.0
    target_rel_ci: float = 0.03
    trial_timeout_s: float = 900.0
    screen_ratio: float = 0.5
    promote_ratio: float = 0.8

    def __post_init__(self) -> None:
        if not 0 <= self.screen_ratio < 1:
            raise UsageError(
                f"--screen-ratio must be in [0, 1), got {self.screen_ratio}",
                "use 0.5 (stop trials under half the best throughput) or 0 (no screening)",
            )
        if not 0 <= self.promote_ratio < 1:
            raise UsageError(
                f"--promote-ratio must be in [0, 1), got {self.promote_ratio}",
                "use 0.8 (end the windows of trials clearly under 0.8x the best) or 0 (full windows)",
            )
        if self.trial_timeout_s <= 0:
            raise UsageError(f"--trial-timeout must be positive, got {self.trial_timeout_s}")
        if self.warmup_steps < 1:
            raise UsageError(f"warmup_steps must be >= 1, got {self.warmup_steps}")
        if self.max_warmup_steps < self.warmup_steps:
            raise UsageError("max_warmup_steps must be >= warmup_steps")
        if not 2 <= self.min_steps <= self.max_steps:
            raise UsageError(
                f"need 2 <= min_steps <= max_steps (--max-steps), "
                f"got min_steps={self.min_steps}, max_steps={self.max_steps}"
            )
        if self.max_seconds <= 0 or self.target_rel_ci <= 0:
            raise UsageError("max_seconds and target_rel_ci must be positive")

    @property
    def step_budget(self) -> int:
        """The `max_steps` given to the Trainer: the window always ends before it."""
        return self.max_warmup_steps + self.max_steps + 1


@dataclass(frozen=True)
class RunConfig:
    """Everything a search needs; the CLI builds one from flags, Python callers directly.

    Attributes:
        model: a built-in preset (``tiny-gpt2``), a local model directory or a hub id.
        space: a shipped space name or a YAML path.
        trials: the study's total trial budget (finished trials already stored count towards it).
        storage: an optuna RDB URL; default from ``AUTOTUNE_STORAGE`` or ``sqlite:///autotune.db``.
        study: the study name; default derived from model, space and sequence length.
        seq_len: tokens per sample; default from the model preset.
        memory_cap: text as given (``20GiB``, ``90%``); parsed by `memory_cap_parsed`.
        seed: seeds the sampler and the model initialisation.
        output_dir: scratch folder for the Trainer (nothing is saved there by default).
        measure: the measurement protocol settings.
        global_batch_size: hold per-device batch x accumulation x world size at this value.
        keep_semantics: hold precision, optimizer family and effective batch at the base config.
        base_args: a JSON/YAML file of `TrainingArguments` kwargs every trial starts from.
        finalists: how many of the best trials are re-measured before the winner is declared
            (0 or 1: none).
        finalist_rounds: interleaved re-measurement rounds (A B C A B C ...).
        allow_mismatch: fingerprint fields allowed to differ when continuing a stored study.
        measure_baseline: measure the base config (or the Transformers defaults) once, before a new
            study's first trial, so the result can state its speedup.
        isolation: ``"process"``: every trial, the baseline and every re-measurement runs in a
            fresh worker process; ``"none"``: all in this process (debugging).
        workers: worker processes at once (None: one per visible GPU, or one on CPU).
        nproc_per_node: processes per trial: above 1, each trial is a fresh `torchrun` group of
            this many DDP processes (rank 0 asks the study, every rank applies its values).
        ddp_timeout_s: how long a collective may wait before a desynchronised group fails.
        backend: ``"optuna"``: trials in autotune's worker processes; ``"ray"``: trials in Ray Tune
            actors through ``Trainer.hyperparameter_search(backend="ray")`` (`autotune.executors.ray`).
        ray_address: the Ray cluster to join (``ray://...`` or ``HOST:PORT``); None: start a local
            Ray instance for the search and shut it down at the end.
        task: ``causal-lm``, ``masked-lm`` or ``seq-classification``; default from the model.
        pretrained: load the model's real weights (default: random weights built from its config).
        trust_remote_code: allow code from the model's hub repository.
        dataset: a local text/JSON lines/CSV/Parquet file or folder, or a hub dataset; default
            synthetic tokens.
        dataset_config: the hub dataset's configuration name.
        split: the dataset split to train on.
        text_column: the column holding the text; default ``text``, else the first string column.
        tokenizer: tokenizer folder or hub id for `dataset`; default the model's.
        pad_to_multiple_of: pad classification batches to a multiple of this.
        packing: how language-model text becomes samples: ``"blocks"`` concatenates it and cuts
            ``seq_len`` blocks (every token real, as ``run_clm.py`` does); ``"examples"`` keeps each
            text as one sample, truncated to ``seq_len`` and padded per batch (fine-tuning and chat
            data), where the ``padding_free`` and ``group_by_length`` knobs apply.
        compile_cache: the folder every trial process of the study compiles into (inductor's and
            Triton's caches), shared storage for pools on several hosts; default: next to a SQLite
            store's file, else under the user's cache directory by study name
            (`autotune.trial.compile_cache.compile_cache_folder`).
        loss_tolerance: a trial whose loss is worse than the baseline's at equal tokens by more
            than this fraction is infeasible (reason ``loss_diverged``).
        train_tokens: the length of the user's run in tokens: trials are then scored on its
            predicted wall time (set-up + compilation + tokens / throughput), not on throughput.
        train_steps: the same in optimizer steps of the baseline's batch (needs the baseline).
        price_per_hour: the price of an hour of this machine: the answer states the run's cost.
    """

    model: str = "tiny-gpt2"
    space: str = "quick"
    trials: int = 8
    storage: str | None = None
    study: str | None = None
    seq_len: int | None = None
    memory_cap: str | None = None
    seed: int = 0
    output_dir: str | None = None
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    global_batch_size: int | None = None
    keep_semantics: bool = False
    base_args: str | None = None
    finalists: int = 3
    finalist_rounds: int = 3
    allow_mismatch: tuple[str, ...] = ()
    measure_baseline: bool = True
    isolation: Literal["process", "none"] = "process"
    workers: int | None = None
    nproc_per_node: int = 1
    ddp_timeout_s: float = 300.0
    backend: Literal["optuna", "ray"] = "optuna"
    ray_address: str | None = None
    task: str | None = None
    pretrained: bool = False
    trust_remote_code: bool = False
    dataset: str | None = None
    dataset_config: str | None = None
    split: str = "train"
    text_column: str | None = None
    tokenizer: str | None = None
    pad_to_multiple_of: int | None = None
    packing: str = "blocks"
    compile_cache: str | None = None
    loss_tolerance: float = 0.05
    train_tokens: int | None = None
    train_steps: int | None = None
    price_per_hour: float | None = None

    def __post_init__(self) -> None:
        self._check_workload()
        self._check_run_length()
        if self.isolation not in ("process", "none"):
            raise UsageError(f"invalid isolation {self.isolation!r}", "use --isolation process or none")
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"--workers must be at least 1, got {self.workers}")
        if self.nproc_per_node < 1 or self.ddp_timeout_s <= 0:
            raise UsageError(
                f"--nproc-per-node must be at least 1 and --ddp-timeout positive, got "
                f"{self.nproc_per_node} and {self.ddp_timeout_s}"
            )
        if self.nproc_per_node > 1 and (self.isolation == "none" or self.workers not in (None, 1)):
            raise UsageError(
                f"--nproc-per-node {self.nproc_per_node} runs each trial as its own torchrun group",
                "drop --isolation none and --workers",
            )
        if self.workers not in (None, 1) and self.isolation == "none":
            raise UsageError(
                f"--workers {self.workers} needs worker processes", "drop --isolation none, or --workers"
            )
        self._check_backend()
        if self.finalists < 0 or self.finalist_rounds < 1:
            raise UsageError(
                f"--finalists must be >= 0 and --finalist-rounds >= 1, got {self.finalists} and "
                f"{self.finalist_rounds}"
            )
        if self.global_batch_size is not None and self.global_batch_size < 1:
            raise UsageError(f"--global-batch-size must be at least 1, got {self.global_batch_size}")
        if self.keep_semantics and self.global_batch_size is not None:
            raise UsageError(
                "--keep-semantics already holds the global batch at the base config's",
                "drop --global-batch-size, or set the batch in --base-args",
            )
        if self.trials < 1:
            raise UsageError(f"--trials must be at least 1, got {self.trials}")
        if self.seq_len is not None and self.seq_len < 2:
            raise UsageError(f"--seq-len must be at least 2, got {self.seq_len}")
        if self.memory_cap is not None:
            parse_memory_cap(self.memory_cap)

    def _check_run_length(self) -> None:
        if not self.loss_tolerance > 0:
            raise UsageError(f"--loss-tolerance must be positive, got {self.loss_tolerance}")
        if self.train_tokens is not None and self.train_steps is not None:
            raise UsageError("give --train-tokens or --train-steps, not both", "drop one of them")
        for flag, value in (("--train-tokens", self.train_tokens), ("--train-steps", self.train_steps)):
            if value is not None and value < 1:
                raise UsageError(f"{flag} must be at least 1, got {value}")
        if self.train_steps is not None and not self.measure_baseline:
            raise UsageError(
                "--train-steps counts steps of the baseline's batch, which --no-baseline does not measure",
                "drop --no-baseline, or give --train-tokens",
            )
        if self.price_per_hour is not None and not self.price_per_hour > 0:
            raise UsageError(f"--price-per-hour must be positive, got {self.price_per_hour}")

    def _check_backend(self) -> None:
        if self.backend not in ("optuna", "ray"):
            raise UsageError(f"invalid backend {self.backend!r}", "use --backend optuna or ray")
        if self.backend != "ray":
            if self.ray_address is not None:
                raise UsageError("--ray-address only applies with --backend ray", "add --backend ray")
            return
        if self.isolation == "none":
            raise UsageError(
                "--backend ray runs trials in Ray actors, not in this process",
                "drop --isolation none, or --backend ray",
            )
        if self.workers is not None:
            raise UsageError(
                f"--workers {self.workers} does not apply with --backend ray: Ray runs one trial per GPU "
                "(or per CPU machine)",
                "drop --workers",
            )
        if self.nproc_per_node > 1:
            raise UsageError(
                "--nproc-per-node runs trials as torchrun groups, not Ray actors",
                "drop --nproc-per-node, or --backend ray",
            )

    def _check_workload(self) -> None:
        if self.task is not None and self.task not in ("causal-lm", "masked-lm", "seq-classification"):
            raise UsageError(
                f"unknown --task {self.task!r}", "use causal-lm, masked-lm or seq-classification"
            )
        if self.pad_to_multiple_of is not None and self.pad_to_multiple_of < 1:
            raise UsageError(f"--pad-to-multiple-of must be at least 1, got {self.pad_to_multiple_of}")
        if self.packing not in ("blocks", "examples"):
            raise UsageError(f"unknown --packing {self.packing!r}", "use --packing blocks or examples")
        if self.packing == "examples" and self.task == "seq-classification":
            raise UsageError(
                "--packing examples applies to language-model text; classification samples are always "
                "one text each",
                "drop --packing",
            )
        given = [
            flag
            for flag, value in (
                ("--dataset-config", self.dataset_config),
                ("--text-column", self.text_column),
                ("--tokenizer", self.tokenizer),
                ("--pad-to-multiple-of", self.pad_to_multiple_of),
                ("--packing", None if self.packing == "blocks" else self.packing),
            )
            if value is not None
        ]
        if given and self.dataset is None:
            raise UsageError(f"{given[0]} only applies with --dataset", "add --dataset PATH_OR_HUB_ID")

    @property
    def storage_url(self) -> str:
        return self.storage or os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE

    @property
    def storage_display(self) -> str:
        """The storage URL as it may be printed or stored: its password hidden."""
        from autotune.study.urls import display_url

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
        data[SCHEMA_KEY] = RUN_CONFIG_SCHEMA
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
        check_schema(data)
        fields = {**data, **{k: v for k, v in overrides.items() if v is not None}}
        if isinstance(fields.get("measure"), dict):
            known_measure = set(MeasureSettings.__dataclass_fields__)
            fields["measure"] = MeasureSettings(
                **{k: v for k, v in fields["measure"].items() if k in known_measure}
            )
        fields["allow_mismatch"] = tuple(fields.get("allow_mismatch") or ())
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in fields.items() if k in known})


# The run configuration's schema: raised whenever a key is added or a value changes meaning, so that
# an older worker refuses a study it would misread. 1: before versions were recorded.
RUN_CONFIG_SCHEMA = 2
SCHEMA_KEY = "schema"
VERSION_KEY = "autotune_version"


def autotune_version() -> str:
    from autotune import __version__

    return __version__


def check_schema(data: dict[str, Any]) -> None:
    """Refuse a stored run configuration written with a newer schema than this autotune's.

    Raises:
        UsageError: its schema is newer (the message names both autotune versions).
    """
    schema = data.get(SCHEMA_KEY, 1)
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise UsageError(f"stored run configuration has an invalid schema {schema!r}")
    if schema <= RUN_CONFIG_SCHEMA:
        return
    writer = data.get(VERSION_KEY) or "a newer version"
    raise UsageError(
        f"the study's run configuration has schema {schema} (written by autotune {writer}), "
        f"newer than schema {RUN_CONFIG_SCHEMA} of this autotune {autotune_version()}",
        f"upgrade autotune on this worker to {writer} or later",
    )


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
        from autotune.space.searchspace import builtin_spaces

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
            "(trust_remote_code), which this worker was not allowed to run",
            "read that code, then start the worker with --trust-remote-code",
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
    import json

    import yaml
    from transformers import TrainingArguments

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --base-args {path}: {exc}", "pass a JSON or YAML file") from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        raise UsageError(f"--base-args {path} is not valid JSON/YAML", "fix the file's syntax") from None
    if not isinstance(data, dict):
        raise UsageError(f"--base-args {path} must hold a mapping of TrainingArguments fields")
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    for key in data:
        if key not in fields:
            raise UsageError(
                f"--base-args {path}: {key!r} is not a TrainingArguments field",
                "see `python -c 'import transformers; help(transformers.TrainingArguments)'`",
            )
        if key in _RESERVED_ARGS:
            raise UsageError(f"--base-args {path}: {key!r} is set by the search itself", f"remove {key}")
    return dict(data)
