"""Knob proofs that need a CUDA GPU: each value takes effect inside training on the device.

Marked `gpu`; skipped where torch sees no CUDA device (CI has none). Run on a GPU machine with
`.venv/bin/python -m pytest -q tests/gpu`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import TrainerCallback

import autotune
from autotune.space.defaults import tf32_matmuls
from tests.helpers import FAST, IN_PROCESS, KnobProbe, write_space

pytestmark = pytest.mark.gpu


class CudaProbe(TrainerCallback):
    """What only a GPU trial shows: tf32 switches, pinned memory, parameter device."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.seen.append(
            {
                "tf32": tf32_matmuls(),
                "pin_memory": kw["train_dataloader"].base_dataloader.pin_memory,
                "empty_cache_steps": args.torch_empty_cache_steps,
                "device": next(kw["model"].parameters()).device.type,
            }
        )


def distinct(
    knobs: dict[str, list[Any]], trials: list[dict[str, Any]]
) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
    """The space and `trials` with a repeated configuration told apart by its accumulation steps:
    the search answers an exact repeat from the store without training it, and these tests repeat a
    value on purpose (does the state the earlier trial switched on go away?)."""
    out = [{**t, "gradient_accumulation_steps": 1 + trials[:i].count(t)} for i, t in enumerate(trials)]
    return {
        **knobs,
        "gradient_accumulation_steps": sorted({t["gradient_accumulation_steps"] for t in out}),
    }, out


def run(tmp_path: Path, knobs: dict[str, list[Any]], trials: list[dict[str, Any]], model: str = "tiny-llama"):
    probe, cuda = KnobProbe(), CudaProbe()
    knobs, trials = distinct(knobs, trials)
    compiled: list[tuple[Any, Any]] = []
    real_compile = torch.compile

    def spy(module: Any, *args: Any, **kwargs: Any) -> Any:
        compiled.append((kwargs.get("backend"), kwargs.get("mode")))
        return real_compile(module, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "compile", spy)
        result = autotune.search(
            model=model,
            space=write_space(tmp_path, knobs),
            trials=len(trials),
            storage=f"sqlite:///{tmp_path / 'gpu.db'}",
            seq_len=64,
            **IN_PROCESS,  # the probes and the compile spy see only this process
            callbacks=[probe, cuda],
            enqueue=trials,
        )
    for trial in result.trials:
        assert trial.state == "COMPLETE", trial.message
        assert "duplicate_of" not in trial.attrs  # each one trained
    assert len(probe.trials) == len(trials)
    return probe.trials, cuda.seen, compiled, result


def test_precisions_autocast_and_tf32(tmp_path: Path) -> None:
    order = ["bf16", "fp32", "fp16", "tf32", "bf16+tf32", "fp32"]
    seen, cuda, _, result = run(
        tmp_path, {"precision": list(dict.fromkeys(order))}, [{"precision": p} for p in order]
    )
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    for precision, got, flags in zip(order, seen, cuda, strict=True):
        assert got["output_dtypes"] == {dtype[precision.split("+")[0]]}, precision
        assert flags["tf32"] is precision.endswith("tf32"), precision
        assert flags["device"] == "cuda"
    assert all(
        t.attrs["memory_source"].startswith("cuda_allocator") and t.attrs["peak_allocated_bytes"] > 0
        for t in result.trials
    )


def test_fused_adamw_on_cuda(tmp_path: Path) -> None:
    order = ["adamw_torch_fused", "adamw_torch", "adamw_torch_fused"]
    seen, _, _, _ = run(
        tmp_path, {"optim": ["adamw_torch", "adamw_torch_fused"]}, [{"optim": o} for o in order]
    )
    assert [(s["optimizer_class"], s["fused"]) for s in seen] == [
        ("AdamW", True),
        ("AdamW", False),
        ("AdamW", True),
    ]


def test_attention_kernels(tmp_path: Path) -> None:
    order = ["sdpa", "eager", "sdpa"]
    if importlib.util.find_spec("flash_attn") is not None:
        order += ["flash_attention_2", "eager"]
    trials = [{"attn_implementation": a, "precision": "bf16"} for a in order]
    seen, _, _, _ = run(
        tmp_path, {"attn_implementation": list(dict.fromkeys(order)), "precision": ["bf16"]}, trials
    )
    assert [s["attn_implementation"] for s in seen] == order


def test_compile_backends_and_modes(tmp_path: Path) -> None:
    trials = [
        {"torch_compile": "inductor", "torch_compile_mode": "max-autotune-no-cudagraphs"},
        {"torch_compile": "off"},
        {"torch_compile": "cudagraphs"},
        {"torch_compile": "inductor", "torch_compile_mode": "reduce-overhead"},
    ]
    knobs = {
        "torch_compile": ["off", "inductor", "cudagraphs"],
        "torch_compile_mode": ["max-autotune-no-cudagraphs", "reduce-overhead"],
    }
    seen, _, compiled, _ = run(tmp_path, knobs, trials)
    assert [s["traced"] for s in seen] == [True, False, True, True]
    assert compiled == [
        ("inductor", "max-autotune-no-cudagraphs"),
        ("cudagraphs", None),
        ("inductor", "reduce-overhead"),
    ]


def test_pin_memory_and_empty_cache_steps(tmp_path: Path) -> None:
    trials = [
        {"dataloader_pin_memory": True, "torch_empty_cache_steps": 2},
        {"dataloader_pin_memory": False, "torch_empty_cache_steps": 0},
    ]
    knobs = {"dataloader_pin_memory": [False, True], "torch_empty_cache_steps": [0, 2]}
    _, cuda, _, _ = run(tmp_path, knobs, trials)
    assert [(c["pin_memory"], c["empty_cache_steps"]) for c in cuda] == [(True, 2), (False, None)]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="FSDP trials need two GPUs (one per rank)")
def test_fsdp_strategies_shard_the_model_on_gpus(tmp_path: Path) -> None:
    knobs = {"data_parallel": ["ddp", "fsdp_full_shard", "fsdp_shard_grad_op"]}
    result = autotune.search(
        model="tiny-llama",
        space=write_space(tmp_path, knobs),
        trials=3,
        storage=f"sqlite:///{tmp_path / 'fsdp.db'}",
        seq_len=64,
        measure=FAST,
        finalists=0,
        measure_baseline=False,
        nproc_per_node=2,
        workers=1,
        ddp_timeout_s=120,
        enqueue=[{"data_parallel": s} for s in knobs["data_parallel"]],
    )
    for trial in result.study.optuna_study.trials:
        assert trial.state.name == "COMPLETE", trial.user_attrs.get("message")
        # Read back from what the Trainer built: an FSDP2 module, resharded or not after the forward.
        assert trial.user_attrs["data_parallel_applied"] == trial.params["data_parallel"]
        assert len(trial.user_attrs["rank_peak_memory_bytes"]) == 2


# --- GPU-only knob values (issue 32, item 3) -----------------------------------------------------


def _has(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def _capability() -> tuple[int, int]:
    return torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)


class ModuleProbe(TrainerCallback):
    """After each trial's first optimizer step (the model prepared and trained): the names of its
    modules as they print themselves (`_get_name`: the class name, or the name a patch gave it;
    Liger patches an instance's modules in place, binding its forward and its name)."""

    def __init__(self) -> None:
        self.trials: list[set[str]] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.trials.append(set())

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if not self.trials[-1]:
            self.trials[-1].update(module._get_name() for module in kw["model"].modules())


@pytest.mark.skipif(
    not _has("liger_kernel"), reason="use_liger_kernel needs liger-kernel (pip install 'hf-autotune[gpu]')"
)
def test_liger_kernel_patches_the_trial_model(tmp_path: Path) -> None:
    modules = ModuleProbe()
    trials = [
        {"use_liger_kernel": True, "precision": "bf16"},
        {"use_liger_kernel": False, "precision": "bf16"},
    ]
    result = autotune.search(
        model="tiny-llama",
        space=write_space(tmp_path, {"use_liger_kernel": [False, True], "precision": ["bf16"]}),
        trials=2,
        storage=f"sqlite:///{tmp_path / 'liger.db'}",
        seq_len=64,
        **IN_PROCESS,
        callbacks=[modules],
        enqueue=trials,
    )
    for trial in result.trials:
        assert trial.state == "COMPLETE", trial.message
    patched, plain = modules.trials
    assert any(name.startswith("Liger") for name in patched), sorted(patched)  # LigerRMSNorm, ...
    assert not any(name.startswith("Liger") for name in plain), sorted(plain)


@pytest.mark.skipif(_capability() < (8, 9), reason="fp8 needs compute capability 8.9 or higher")
@pytest.mark.skipif(not _has("torchao"), reason="fp8 trains through torchao (pip install 'hf-autotune[gpu]')")
def test_fp8_trains_float8_linear_layers(tmp_path: Path) -> None:
    modules = ModuleProbe()
    trials = [{"precision": "fp8"}, {"precision": "bf16"}]
    result = autotune.search(
        model="tiny-llama",
        space=write_space(tmp_path, {"precision": ["bf16", "fp8"]}),
        trials=2,
        storage=f"sqlite:///{tmp_path / 'fp8.db'}",
        seq_len=64,
        **IN_PROCESS,
        callbacks=[modules],
        enqueue=trials,
    )
    for trial in result.trials:  # an fp8 trial without Float8Linear layers fails (see the trainer)
        assert trial.state == "COMPLETE", trial.message
        assert trial.attrs["loss_curve"], trial.number
    fp8, bf16 = modules.trials
    assert "Float8Linear" in fp8 and "Float8Linear" not in bf16


@pytest.mark.skipif(
    not _has("bitsandbytes"), reason="base_weights=4bit needs bitsandbytes (pip install 'hf-autotune[gpu]')"
)
def test_four_bit_base_builds_quantized_and_trains_its_unquantized_layers() -> None:
    """A 4-bit base as a trial builds it (random weights saved and loaded back through transformers'
    bitsandbytes quantizer), trained for a few steps on what stays trainable (embeddings, norms, the
    head): the search offers 4bit only under adapters (--peft, issue 32 item 1, another branch), so
    the Trainer's own QLoRA path is checked once --peft exists."""
    from autotune.space.mapping import trial_kwargs
    from autotune.workloads.workload import resolve_workload

    workload = resolve_workload("tiny-llama", seq_len=64)
    _, model_kwargs = trial_kwargs({"base_weights": "4bit"})
    model = workload.build_model(model_kwargs)
    names = {type(module).__name__ for module in model.modules()}
    assert "Linear4bit" in names, sorted(names)
    assert getattr(model, "is_quantized", False)
    assert workload.config.to_dict().get("quantization_config") is None  # the workload's config untouched
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and next(model.parameters()).device.type == "cuda"
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    ids = torch.randint(0, int(workload.config.vocab_size), (4, 64), device="cuda")
    losses = []
    for _ in range(3):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
    assert all(torch.isfinite(torch.tensor(losses))), losses


@pytest.mark.skipif(
    not _has("bitsandbytes"), reason="base_weights=4bit needs bitsandbytes (pip install 'hf-autotune[gpu]')"
)
def test_four_bit_base_under_lora_in_a_search(tmp_path: Path) -> None:
    """QLoRA as a search runs it: `--peft lora` with base_weights 4bit beside a bf16 base. Both
    train the adapter only (its parameters a small part of the model's), and the 4-bit trial's
    model holds bitsandbytes' 4-bit layers."""
    modules = ModuleProbe()
    trials = [{"base_weights": "4bit", "precision": "bf16"}, {"base_weights": "bf16", "precision": "bf16"}]
    result = autotune.search(
        model="tiny-llama",
        space=write_space(tmp_path, {"base_weights": ["bf16", "4bit"], "precision": ["bf16"]}),
        trials=2,
        storage=f"sqlite:///{tmp_path / 'qlora.db'}",
        seq_len=64,
        peft="lora",
        **IN_PROCESS,
        callbacks=[modules],
        enqueue=trials,
    )
    for trial in result.trials:
        assert trial.state == "COMPLETE", trial.message
        trainable, total = trial.trainable_params or 0, trial.total_params or 0
        assert 0 < trainable < total / 10, (trainable, total)
    four_bit, bf16 = modules.trials
    assert "Linear4bit" in four_bit and "Linear4bit" not in bf16
