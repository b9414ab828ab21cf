"""The knob values a run gets without autotune: what `TrainingArguments` and `from_pretrained` pick.

No default is spelled here: each is read from the installed transformers. With torch >= 2.8,
`TrainingArguments().optim` is ``adamw_torch_fused``, not ``adamw_torch``; a speedup stated against
a default nobody runs would be wrong, and the next release may change another default.

`knob_defaults` builds a real `TrainingArguments` from a base config on this machine (the baseline a
search measures). `base_knobs` reads a base config over the dataclass field defaults without
building one: no device set-up, so it is safe in any process, and cheap once cached.
Pure at module top: transformers is imported inside the functions (`autotune --help` stays fast).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import UsageError
from autotune.space.knobs import CATALOGUE, Value
from autotune.space.mapping import MAPPED_ARGS, precision_of

if TYPE_CHECKING:
    from transformers import TrainingArguments


def training_arguments(args_class: type | None = None, **kwargs: Any) -> TrainingArguments:
    """`TrainingArguments(**kwargs)` (or the user's own subclass of it, `args_class`: TRL's
    `SFTConfig` stays one), with its TF32 switch applied even in a process that built others before it.

    transformers' ``enable_tf32`` (which ``__post_init__`` calls for ``tf32`` and for compile) is
    ``lru_cache``d: once called with a value, a later call with that value does nothing, even after
    another call switched TF32 the other way. In a process that runs several trials (``--isolation
    none``, finalists, `tune(trainer)`) an fp32 trial after a tf32 one then trained with TF32
    matmuls (seen on an H100). Forgetting the cache first makes every build switch as it says.
    """
    from transformers import TrainingArguments
    from transformers.utils import import_utils

    forget = getattr(getattr(import_utils, "enable_tf32", None), "cache_clear", None)
    if forget is not None:
        forget()
    return (args_class or TrainingArguments)(**kwargs)


def tf32_matmuls() -> bool:
    """Whether float32 matrix multiplications on CUDA run as TF32 now.

    Read through torch's per-backend setting (torch >= 2.9), which both APIs write: transformers
    sets the new one (``torch.backends.fp32_precision``), accelerate the legacy ``allow_tf32`` for a
    compiled run. ``torch.get_float32_matmul_precision()`` raises a RuntimeError once the new API
    has set TF32, and the legacy flag once the two were mixed, as they are in such trials.
    """
    import torch

    matmul: Any = torch.backends.cuda.matmul
    if not hasattr(matmul, "fp32_precision"):  # torch < 2.9: the legacy flag is the only one
        return bool(matmul.allow_tf32)
    own = matmul.fp32_precision
    backends: Any = torch.backends
    return (own if own != "none" else backends.fp32_precision) == "tf32"


def knob_defaults(
    base_args: Mapping[str, Any] | None = None, *, sdpa: bool, cuda: bool, args_class: type | None = None
) -> dict[str, Value]:
    """The knob values of a run without autotune on this machine.

    `TrainingArguments(**base_args)` is built as the trials build it (``use_cpu`` without a GPU, which
    also turns pinned memory off), so everything its ``__post_init__`` derives counts: a compile mode
    or backend turns compile on, ``gradient_checkpointing`` stands for ``activation_checkpointing``.
    The attention kernel is the model's own default: sdpa where the model class supports it.

    Args:
        base_args: the user's base `TrainingArguments` kwargs (None: all defaults).
        sdpa: the model class supports scaled-dot-product attention.
        cuda: the trials run on a CUDA GPU.
        args_class: the class the trials build their arguments with (None: `TrainingArguments`).

    Raises:
        UsageError: the installed `TrainingArguments` refuses the base config on this machine.
    """
    with (
        tempfile.TemporaryDirectory(prefix="autotune-defaults-") as output_dir,
        _tf32_restored(),
        _no_device_selected(),
    ):
        try:
            args = training_arguments(
                args_class, **{**(base_args or {}), "output_dir": output_dir, "use_cpu": not cuda}
            )
        except (TypeError, ValueError) as exc:
            raise UsageError(
                f"the base config is not valid TrainingArguments on this machine: {exc}",
                "change base_args",
                field="base_args",
            ) from None
    # A Trainer pads its batches unless it is given a flattening collator; from_pretrained loads
    # the weights as the config or checkpoint says.
    values = {
        **knobs_of(vars(args)),
        "attn_implementation": default_attention(sdpa),
        "padding_free": sft_padding_free(vars(args)),
        "base_weights": "as_is",
    }
    return {name: values[name] for name in CATALOGUE if name in values}


def sft_padding_free(args: Mapping[str, Any]) -> bool:
    """Whether a Trainer's batches are padding-free: TRL's `SFTConfig` says so, or packs with a
    best-fit strategy, which TRL runs padding-free (`SFTTrainer.__init__`); any other Trainer pads."""
    packed = bool(args.get("packing")) and args.get("packing_strategy") in ("bfd", "bfd_split")
    return bool(args.get("padding_free")) or packed


def default_attention(sdpa: bool) -> str:
    """The attention kernel `from_pretrained` picks when none is asked for."""
    return "sdpa" if sdpa else "eager"


def base_knobs(base_args: Mapping[str, Any] | None = None) -> dict[str, Value]:
    """The `TrainingArguments` knob values a base config amounts to over the field defaults.

    Unlike `knob_defaults`, nothing is built: what ``__post_init__`` or the machine would change
    (pinned memory without a GPU) is not applied, and there is no attention kernel. Precision,
    optimizer and batch split, what the training math depends on, come out the same.
    """
    return knobs_of({**training_args_defaults(), **(base_args or {})})


def knobs_of(args: Mapping[str, Any]) -> dict[str, Value]:
    """The knob values that `TrainingArguments` field values amount to: the inverse of
    `autotune.space.mapping.trial_kwargs` for the knobs that land in `TrainingArguments`."""
    backend = args.get("torch_compile_backend")
    compile_backend = str(backend or "inductor") if args.get("torch_compile") or backend else "off"
    # the knobs whose field is not their own, read back by their mappers' inverses
    values: dict[str, Value] = {
        "precision": precision_of(args),
        "torch_compile": compile_backend,
        "torch_empty_cache_steps": int(args.get("torch_empty_cache_steps") or 0),
        "group_by_length": args.get("train_sampling_strategy") == "group_by_length",
        "data_parallel": strategy_of(args),
    }
    for knob in CATALOGUE.values():
        if knob.target != "args" or knob.name in MAPPED_ARGS:
            continue
        if knob.requires is not None and values.get(knob.requires[0]) not in knob.requires[1]:
            continue
        # DDP's own settings only where the base config sets them: TrainingArguments leaves them
        # None, which lets the Trainer and torch decide (find unused parameters unless
        # checkpointing, 25 MiB buckets, no static graph, buffers broadcast), and a baseline run
        # that way is what users get.
        if knob.ranks_only and args.get(knob.name) is None:
            continue
        if knob.name not in args:  # a field of TRL's SFTConfig (packing): not on TrainingArguments
            continue
        values[knob.name] = knob.read(args.get(knob.name))
    if values["activation_checkpointing"]:
        kwargs = args.get("activation_checkpointing_kwargs") or {}
        values["checkpoint_every_n_layers"] = int(kwargs.get("every_n_layers", 1))
        # transformers passes {"use_reentrant": False} when the kwargs give torch nothing else
        values["gradient_checkpointing_reentrant"] = bool(kwargs.get("use_reentrant", False))
    return values


def strategy_of(args: Mapping[str, Any]) -> str:
    """The ``data_parallel`` knob value `TrainingArguments` fields amount to: a DeepSpeed config's
    ZeRO stage, FSDP's resharding, else DDP (what the Trainer runs several ranks with)."""
    import json

    deepspeed = args.get("deepspeed")
    if isinstance(deepspeed, str) and deepspeed:
        with contextlib.suppress(OSError, ValueError), open(deepspeed, encoding="utf-8") as handle:
            deepspeed = json.load(handle)
    if isinstance(deepspeed, Mapping):
        stage = int((deepspeed.get("zero_optimization") or {}).get("stage", 0))
        return f"zero{stage}" if stage in (1, 2, 3) else "ddp"
    if args.get("fsdp"):
        config = args.get("fsdp_config") or {}
        reshard = config.get("reshard_after_forward", True) if isinstance(config, Mapping) else True
        sharding = str(args["fsdp"]) if isinstance(args["fsdp"], str) else ""
        grad_op = reshard in (False, "shard_grad_op", "SHARD_GRAD_OP") or "shard_grad_op" in sharding
        return "fsdp_shard_grad_op" if grad_op else "fsdp_full_shard"
    return "ddp"


def training_args_defaults() -> dict[str, Any]:
    """Field name -> the default the installed `TrainingArguments` gives it (enums as their values)."""
    return dict(_field_defaults())


@functools.cache
def _field_defaults() -> dict[str, Any]:
    """The defaults, from the installed transformers' own file of them when it was read before:
    importing `transformers.training_args` is slow (it imports peft, which imports several model
    types) and would be most of `show`, `export` and `report` on a store of any size."""
    stamp = _training_args_stamp()
    saved = _defaults_file(stamp) if stamp else None
    if saved is not None:
        with contextlib.suppress(OSError, ValueError):
            cached = json.loads(saved.read_text(encoding="utf-8"))
            if isinstance(cached, dict) and cached.get("stamp") == stamp:
                return dict(cached["defaults"])
    defaults = _read_field_defaults()
    if saved is not None:
        with contextlib.suppress(OSError, TypeError, ValueError):
            text = json.dumps({"stamp": stamp, "defaults": defaults})
            if json.loads(text)["defaults"] == defaults:  # only what JSON gives back unchanged
                saved.parent.mkdir(parents=True, exist_ok=True)
                partial = saved.with_suffix(f".{os.getpid()}.tmp")
                partial.write_text(text, encoding="utf-8")
                os.replace(partial, saved)
    return defaults


def _training_args_stamp() -> str | None:
    """The installed transformers' version and its ``training_args.py`` (path, size, mtime),
    found without importing it; None where it cannot be told."""
    try:
        version = importlib.metadata.version("transformers")
        spec = importlib.util.find_spec("transformers")
    except (importlib.metadata.PackageNotFoundError, ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(next(iter(spec.submodule_search_locations))) / "training_args.py"
    try:
        stat = source.stat()
    except OSError:
        return None
    return f"{version}:{source}:{stat.st_size}:{stat.st_mtime_ns}"


def _defaults_file(stamp: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    return base / "autotune" / "training-args-defaults" / f"{digest}.json"


def _read_field_defaults() -> dict[str, Any]:
    from transformers import TrainingArguments

    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(TrainingArguments):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        defaults[f.name] = getattr(value, "value", value)
    return defaults


@contextlib.contextmanager
def _no_device_selected() -> Iterator[None]:
    """Building `TrainingArguments` on a GPU machine selects ``cuda:0`` (``torch.cuda.set_device``),
    which creates the device's CUDA context: 518 MiB of an H100 that the search's own process, which
    trains nothing, then held for the whole search, beside the workers that train. Reading the
    defaults needs no device: the selection is skipped while they are built."""
    import torch

    select = torch.cuda.set_device
    torch.cuda.set_device = lambda device: None
    try:
        yield
    finally:
        torch.cuda.set_device = select


@contextlib.contextmanager
def _tf32_restored() -> Iterator[None]:
    """Building `TrainingArguments` with ``tf32`` or ``torch_compile`` switches TF32 matmuls for
    the whole process: put the process's setting back."""
    import torch

    backends: Any = torch.backends
    if hasattr(backends, "fp32_precision"):  # torch >= 2.9, the API transformers uses there
        saved = backends.fp32_precision
        try:
            yield
        finally:
            backends.fp32_precision = saved
        return
    matmul, cudnn = backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32
    try:
        yield
    finally:
        backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32 = matmul, cudnn
