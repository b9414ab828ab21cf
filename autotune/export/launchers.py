"""The exported config as the launchers take it: an `accelerate` config (`to_accelerate`) and a
DeepSpeed config (`to_deepspeed`).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from autotune.errors import UsageError
from autotune.export.config import collator_line
from autotune.export.formats import comment, flag_args


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
    text = comment(config) + f"# TrainingArguments still to pass: {rest}\n"
    if config["model_kwargs"]:
        kwargs = ", ".join(f"{k}={v!r}" for k, v in config["model_kwargs"].items())
        text += f"# model-load kwargs: from_pretrained(..., {kwargs})\n"
    collator = collator_line(config)
    if collator:
        text += f"# {collator}\n"
    return text + yaml.safe_dump(accelerate_dict(config), sort_keys=False)


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
