"""What a trial's kernel library patched in its process is undone for the next trial there
(`autotune.trial.patches`): liger-kernel replaces names in the modeling module of the model it
patches, and an in-process trial after a Liger one trained Liger's modules (seen on an H200)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch.nn.functional
from transformers import TrainerCallback
from transformers.models.llama import modeling_llama

import autotune
from autotune.trial.patches import undone_kernel_patches
from tests.helpers import IN_PROCESS, write_space

LIGER = "liger_kernel.transformers.fake"


class FakeLigerRMSNorm(modeling_llama.LlamaRMSNorm):
    pass


FakeLigerRMSNorm.__module__ = LIGER


ORIGINAL_FORWARD = modeling_llama.LlamaForCausalLM.__dict__["forward"]


def fake_lce_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    return ORIGINAL_FORWARD(self, *args, **kwargs)


fake_lce_forward.__module__ = LIGER


ORIGINAL_CROSS_ENTROPY = torch.nn.functional.cross_entropy


def fake_cross_entropy(*args: Any, **kwargs: Any) -> Any:
    return ORIGINAL_CROSS_ENTROPY(*args, **kwargs)


fake_cross_entropy.__module__ = LIGER


def patch_like_liger() -> None:
    """What `apply_liger_kernel_to_llama` does beyond the instance (liger-kernel 0.8)."""
    modeling_llama.LlamaRMSNorm = FakeLigerRMSNorm
    modeling_llama.LlamaForCausalLM.forward = fake_lce_forward
    modeling_llama.liger_rotary_pos_emb = fake_cross_entropy  # a name it adds
    torch.nn.functional.cross_entropy = fake_cross_entropy


def test_the_names_a_patching_library_replaced_or_added_are_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    norm = modeling_llama.LlamaRMSNorm
    forward = modeling_llama.LlamaForCausalLM.__dict__["forward"]
    cross_entropy = torch.nn.functional.cross_entropy
    monkeypatch.setattr(modeling_llama, "LlamaRMSNorm", norm)  # restored by the monkeypatch if the code fails
    monkeypatch.setattr(modeling_llama.LlamaForCausalLM, "forward", forward)
    monkeypatch.setattr(torch.nn.functional, "cross_entropy", cross_entropy)
    with undone_kernel_patches():
        patch_like_liger()
        modeling_llama.not_a_patch = 1  # what no patching library set stays
    assert modeling_llama.LlamaRMSNorm is norm
    assert modeling_llama.LlamaForCausalLM.__dict__["forward"] is forward
    assert torch.nn.functional.cross_entropy is cross_entropy
    assert not hasattr(modeling_llama, "liger_rotary_pos_emb")
    assert modeling_llama.not_a_patch == 1
    del modeling_llama.not_a_patch


class PatchFirstTrial(TrainerCallback):
    """Patches as liger-kernel does when the first trial begins (its model built: the Trainer applies
    Liger then), and records the norm classes each trial's model was built with."""

    def __init__(self) -> None:
        self.norms: list[set[str]] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        self.norms.append({type(m).__name__ for m in model.modules() if "RMSNorm" in type(m).__name__})
        if len(self.norms) == 1:
            patch_like_liger()


@pytest.mark.timeout(300)
def test_an_in_process_trial_after_a_liger_one_builds_the_models_own_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(modeling_llama, "LlamaRMSNorm", modeling_llama.LlamaRMSNorm)
    monkeypatch.setattr(
        modeling_llama.LlamaForCausalLM, "forward", modeling_llama.LlamaForCausalLM.__dict__["forward"]
    )
    monkeypatch.setattr(torch.nn.functional, "cross_entropy", torch.nn.functional.cross_entropy)
    probe = PatchFirstTrial()
    result = autotune.search(
        model="tiny-llama",
        space=write_space(tmp_path, {"per_device_train_batch_size": [2, 4]}),
        trials=2,
        storage=f"sqlite:///{tmp_path / 'patches.db'}",
        seq_len=32,
        callbacks=[probe],
        enqueue=[{"per_device_train_batch_size": 2}, {"per_device_train_batch_size": 4}],
        **IN_PROCESS,
    )
    assert [t.state for t in result.trials] == ["COMPLETE", "COMPLETE"], [t.message for t in result.trials]
    assert probe.norms == [{"LlamaRMSNorm"}, {"LlamaRMSNorm"}]  # not FakeLigerRMSNorm in the second
    assert modeling_llama.LlamaRMSNorm.__name__ == "LlamaRMSNorm"
    assert modeling_llama.LlamaForCausalLM.__dict__["forward"] is ORIGINAL_FORWARD
    assert torch.nn.functional.cross_entropy is ORIGINAL_CROSS_ENTROPY
