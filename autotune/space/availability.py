"""Which knob values can run here, and why not: checked before a trial trains anything.

Pure rules over two plain descriptions: `Hardware` (the device, its features, installed packages)
and `ModelSupport` (what the model class implements). `detect_hardware` and `model_support` gather
them once per search; the rules themselves import nothing heavy and test in milliseconds with any
hardware one cares to describe.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

# Optional packages some knob values need.
OPTIONAL_PACKAGES = ("flash_attn", "bitsandbytes", "torchao", "triton", "deepspeed", "liger_kernel")

# GPUs whose tensor cores want batch dimensions in multiples of 64 (the Transformers GPU guide).
# Whole words only: an "RTX A1000" is not an A100.
_LARGE_TENSOR_CORE_GPUS = re.compile(r"\b(A100|A800|H100|H800|H200|H20|GH200|B100|B200|GB200)\b")


@dataclass(frozen=True)
class Hardware:
    """What the trials run on.

    Attributes:
        device: ``"cuda"`` or ``"cpu"``.
        name: the device name (``"NVIDIA H100 80GB HBM3"``, ``"cpu"``).
        capability: CUDA compute capability, None on CPU.
        bf16: bf16 autocast is supported.
        packages: the optional packages that import here.
        cxx_compiler: a C++ compiler is on PATH (inductor's CPU backend needs one).
        fused_adamw: `torch.optim.AdamW` takes ``fused=True``.
        count: devices of this kind visible.
        memory_bytes: memory of one device (CUDA) or of the machine (CPU).
    """

    device: str = "cpu"
    name: str = "cpu"
    capability: tuple[int, int] | None = None
    bf16: bool = True
    packages: frozenset[str] = field(default_factory=frozenset)
    cxx_compiler: bool = True
    fused_adamw: bool = True
    count: int = 1
    memory_bytes: int = 0

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def ampere_or_newer(self) -> bool:
        return self.capability is not None and self.capability >= (8, 0)

    @property
    def fp8_tensor_cores(self) -> bool:
        """Compute capability 8.9 (Ada) or newer: the GPUs with fp8 matrix multiplications."""
        return self.cuda and self.capability is not None and self.capability >= (8, 9)

    def batch_multiple(self) -> tuple[int, str]:
        """The batch-size multiple `multiple_of: auto` means here, and why."""
        if not self.cuda:
            return 1, "CPU: no tensor-core alignment, any size"
        if _LARGE_TENSOR_CORE_GPUS.search(self.name):
            return 64, f"{self.name}: A100/H100-class GPU, multiples of 64"
        return 8, f"{self.name}: tensor cores, multiples of 8"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["packages"] = sorted(self.packages)
        data["capability"] = list(self.capability) if self.capability else None
        return data


@dataclass(frozen=True)
class ModelSupport:
    """What a model class implements, for attention and checkpointing rules, and what its data
    is like, for the padding rules.

    Attributes:
        packed_positions: a causal LM that builds its attention masks from position ids, so several
            sequences flattened into one row attend only within themselves (padding-free batches).
        padded: the workload's samples differ in length and are padded per batch (set from the
            workload, not the class: `autotune.plan.build.plan_for`).
        liger: liger-kernel has kernels for this model type (True where it cannot be told:
            liger-kernel not installed, which its own rule reports).
        adapters: the trials train adapters on a frozen base (PEFT), which a 4-bit base needs (set
            from the run, not the class).
        sft: the Trainer's arguments are TRL's `SFTConfig` (`autotune.tune` on an `SFTTrainer`): its
            own knobs (``packing``, ``activation_offloading``) exist only there.
        sft_packed: the `SFTTrainer`'s dataset was packed already (its config packs): it cannot be
            unpacked again.
        sft_truncates: the `SFTConfig` truncates (``max_length`` set), which TRL refuses to do
            padding-free without packing.
        sft_collator: the `SFTTrainer` builds its own collator (no custom one was given), which
            TRL's padding-free mode needs.
        sft_prepares: the `SFTTrainer` prepares its dataset (not a vision dataset, no
            ``skip_prepare_dataset``), which packing needs.
    """

    name: str = "any model"
    sdpa: bool = True
    flash_attn: bool = True
    flex_attn: bool = True
    gradient_checkpointing: bool = True
    packed_positions: bool = True
    padded: bool = True
    liger: bool = True
    adapters: bool = False
    sft: bool = False
    sft_packed: bool = False
    sft_truncates: bool = False
    sft_collator: bool = True
    sft_prepares: bool = True


def detect_hardware() -> Hardware:
    """Describe this machine (imports torch)."""
    import os

    import torch

    packages = frozenset(p for p in OPTIONAL_PACKAGES if importlib.util.find_spec(p) is not None)
    fused = "fused" in inspect.signature(torch.optim.AdamW).parameters
    cxx = any(shutil.which(c) for c in ("g++", "c++", "clang++"))
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return Hardware(
            device="cuda",
            name=props.name,
            capability=(props.major, props.minor),
            bf16=torch.cuda.is_bf16_supported(),
            packages=packages,
            cxx_compiler=cxx,
            fused_adamw=fused,
            count=torch.cuda.device_count(),
            memory_bytes=int(props.total_memory),
        )
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    return Hardware(
        device="cpu",
        name="cpu",
        bf16=True,
        packages=packages,
        cxx_compiler=cxx,
        fused_adamw=fused,
        count=1,
        memory_bytes=int(memory),
    )


def model_support(model_class: Any) -> ModelSupport:
    """Read a `PreTrainedModel` class's support flags."""
    return ModelSupport(
        name=model_class.__name__,
        sdpa=bool(getattr(model_class, "_supports_sdpa", False)),
        flash_attn=bool(getattr(model_class, "_supports_flash_attn", False)),
        flex_attn=bool(getattr(model_class, "_supports_flex_attn", False)),
        gradient_checkpointing=bool(getattr(model_class, "supports_gradient_checkpointing", False)),
        packed_positions=_reads_packed_positions(model_class),
        liger=_liger_supports(model_class),
    )


def _liger_supports(model_class: Any) -> bool:
    """Whether liger-kernel patches this model class's type (its own table of model types); True
    where liger-kernel is not installed or has no such table: the package rule speaks there."""
    if importlib.util.find_spec("liger_kernel") is None:
        return True
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except Exception:  # an older or broken install: let the trial show what happens
        return True
    model_type = getattr(getattr(model_class, "config_class", None), "model_type", None)
    return model_type in MODEL_TYPE_TO_APPLY_LIGER_FN


def _reads_packed_positions(model_class: Any) -> bool:
    """Whether a causal LM class's masks follow packed position ids: its modeling code passes them
    to transformers' `create_causal_mask`, which then keeps each flattened sequence to itself."""
    import sys

    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    causal = {str(name) for name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()}
    if getattr(model_class, "__name__", "") not in causal:
        return False
    try:
        source = inspect.getsource(sys.modules[model_class.__module__])
    except (KeyError, OSError, TypeError):
        return False
    return "create_causal_mask(" in source and "position_ids=position_ids" in source


Rule = Callable[[Any, Hardware, ModelSupport], "str | None"]


def precision_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value in ("tf32", "bf16+tf32") and not (hw.cuda and hw.ampere_or_newer):
        return "tf32 needs an NVIDIA Ampere (sm_80) or newer GPU"
    if value in ("bf16", "bf16+tf32") and not hw.bf16:
        return f"{hw.name} has no bf16 support"
    if value == "fp8":
        return _fp8(hw)
    if value == "fp16" and not hw.cuda:
        # accelerate enables fp16 autocast only on accelerators: on CPU the trial would silently
        # train in fp32 while labelled fp16.
        return "fp16 mixed precision needs a GPU (accelerate trains fp32 on CPU)"
    return None


def optimizer_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value == "adamw_torch_fused" and not hw.fused_adamw:
        return "this torch's AdamW has no fused implementation"
    needs = {
        "adamw_bnb_8bit": "bitsandbytes",
        "paged_adamw_8bit": "bitsandbytes",
        "adamw_torch_8bit": "torchao",
    }
    package = needs.get(str(value))
    if package is None:
        return None
    if package not in hw.packages:
        return f"needs the {package} package (pip install {package})"
    if not hw.cuda:
        return f"{package} 8-bit optimizers need a CUDA GPU"
    return None


def compile_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value == "inductor" and hw.cuda and "triton" not in hw.packages:
        return "inductor on CUDA needs the triton package"
    if value == "inductor" and not hw.cuda and not hw.cxx_compiler:
        return "inductor on CPU needs a C++ compiler (g++ or clang++) on PATH"
    if value == "cudagraphs" and not hw.cuda:
        return "CUDA graphs need a CUDA GPU"
    return None


def compile_mode_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value != "default" and not hw.cuda:
        return f"mode {value} tunes GPU kernels or CUDA graphs: no effect without a CUDA GPU"
    return None


def checkpointing_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value and not model.gradient_checkpointing:
        return f"{model.name} does not support activation checkpointing"
    return None


def pin_memory_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value and not hw.cuda:
        return "pinned memory only speeds up copies to a GPU (TrainingArguments turns it off on CPU)"
    return None


def empty_cache_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value and not hw.cuda:
        return "emptying the device cache does nothing without a GPU"
    return None


def padding_free_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if not value:
        return None
    if model.sft and not model.sft_collator:
        return "TRL's SFTTrainer refuses a custom data collator padding-free (it builds its own)"
    if not model.padded:
        return (
            "the samples are all the same length (no padding to remove); --packing examples keeps "
            "one text per sample"
        )
    if not model.packed_positions:
        return (
            f"{model.name} does not keep flattened sequences apart (causal LMs with position-id masks only)"
        )
    return None


def sft_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    """TRL's own `SFTConfig` fields: only where the Trainer's arguments are one (any value: the
    field does not exist on another Trainer's arguments)."""
    if not model.sft:
        return "not an SFTConfig: a TRL SFTTrainer's own setting"
    return None


def packing_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value is False and model.sft and model.sft_packed:
        return "the SFTTrainer's dataset is packed already (its SFTConfig packs): build it with packing=False"
    if value and model.sft and not model.sft_prepares:
        return "the SFTTrainer prepares no dataset (vision data, or skip_prepare_dataset): nothing packs it"
    if value and model.sft and not model.sft_truncates:
        return "TRL packs into rows of max_length: the SFTConfig's max_length is None"
    return sft_rule(value, hw, model)


def activation_offloading_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value and model.sft and not hw.cuda:
        return "activation offloading moves activations from a CUDA GPU to the CPU: no GPU here"
    return sft_rule(value, hw, model)


def sft_combination(values: Any, model: ModelSupport) -> tuple[str, str] | None:
    """TRL's own refusals of a combination, as a knob and its reason (None: it runs)."""
    packing = values.get("packing", model.sft_packed)
    if model.sft and model.sft_truncates and values.get("padding_free") and not packing:
        return (
            "padding_free",
            "TRL does not truncate padding-free batches without packing (SFTConfig max_length set)",
        )
    return None


def strategy_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    strategy = str(value)
    if strategy.startswith("fsdp") and not hw.cuda:
        # accelerate switches to FSDP for GPU-type set-ups only: on CPU the Trainer would train as
        # plain DDP under FSDP's name (measured with transformers 5.23 and accelerate 1.15).
        return "FSDP needs GPUs: on CPU (gloo) accelerate runs the Trainer as plain DDP instead"
    if strategy.startswith("zero") and "deepspeed" not in hw.packages:
        return "DeepSpeed ZeRO needs the deepspeed package (pip install 'hf-autotune[deepspeed]')"
    return None


def group_by_length_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value and not model.padded:
        return "the samples are all the same length: nothing to group"
    return None


# --- GPU-only knobs and per-batch padding ---------------------------------------------------------
_GPU_EXTRA = "pip install 'hf-autotune[gpu]'"


def _fp8(hw: Hardware) -> str | None:
    if not hw.cuda:
        return "fp8 needs a CUDA GPU with fp8 tensor cores (compute capability 8.9 or higher)"
    if not hw.fp8_tensor_cores:
        # accelerate would silently train fp16 instead, under fp8's name
        major, minor = hw.capability or (0, 0)
        return f"fp8 needs compute capability 8.9 or higher (Ada, Hopper); {hw.name} has {major}.{minor}"
    if "torchao" not in hw.packages:
        return f"fp8 trains through torchao's float8 recipe: needs the torchao package ({_GPU_EXTRA})"
    if not hw.bf16:
        return f"fp8 runs the rest of the model in bf16 autocast: {hw.name} has no bf16 support"
    return None


def base_weights_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value == "bf16" and not hw.bf16:
        return f"{hw.name} has no bf16 support"
    if value != "4bit":
        return None
    if "bitsandbytes" not in hw.packages:
        return f"4-bit weights need the bitsandbytes package ({_GPU_EXTRA})"
    if not hw.cuda:
        return "4-bit weights (bitsandbytes) need a CUDA GPU"
    if not hw.bf16:
        return f"4-bit weights compute in bf16: {hw.name} has no bf16 support"
    if not model.adapters:
        # Only the layers left unquantized (embeddings, norms, the head) would train: another model.
        return "a 4-bit base is frozen: it trains only under adapters (QLoRA), which need --peft"
    return None


def liger_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if not value:
        return None
    if "liger_kernel" not in hw.packages:
        return f"needs the liger-kernel package ({_GPU_EXTRA})"
    if not hw.cuda:
        return "Liger's kernels are Triton kernels: they need a CUDA GPU"
    if not model.liger:
        return f"liger-kernel has no kernels for {model.name}"
    return None


def pad_multiple_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if int(value) > 1 and not model.padded:
        return (
            "the samples are all the same length (packed into blocks of seq_len): no batch is padded; "
            "--packing examples and classification pad per batch"
        )
    return None


def attention_rule(value: Any, hw: Hardware, model: ModelSupport) -> str | None:
    if value == "sdpa" and not model.sdpa:
        return f"{model.name} does not support sdpa attention"
    if value == "flash_attention_2":
        if not model.flash_attn:
            return f"{model.name} does not support flash_attention_2"
        if not hw.cuda:
            return "flash_attention_2 needs a CUDA GPU"
        if "flash_attn" not in hw.packages:
            return "flash_attention_2 needs the flash-attn package (pip install flash-attn)"
        if not hw.ampere_or_newer:
            return "flash_attention_2 needs an Ampere (sm_80) or newer GPU"
    if value == "flex_attention":
        if not model.flex_attn:
            return f"{model.name} does not support flex_attention"
        if not hw.cuda:
            return "flex_attention has no backward pass on CPU"
    return None
