"""PEFT adapters (``--peft``): the config a run names, as peft resolves and exports it; the memory
estimate and FLOPs that count frozen weights apart; the reentrant checkpointing knob; and that both
checkpointing variants train the adapter."""

from __future__ import annotations

import json
from pathlib import Path

import peft
import pytest
import torch

from autotune.errors import UsageError
from autotune.measure.flops import flops_per_token
from autotune.measure.memory_model import DTYPE_BYTES, estimate_memory, static_bytes
from autotune.space.defaults import knob_defaults
from autotune.space.knobs import CATALOGUE
from autotune.space.mapping import trial_kwargs
from autotune.workloads.adapters import exported_config, load_peft, parameter_counts
from autotune.workloads.workload import resolve_workload
from tests.unit.cli_helpers import run

# -- what --peft names ----------------------------------------------------------------------------


def test_lora_is_peft_s_defaults_with_the_workload_s_task_type():
    assert load_peft("lora", "causal-lm") == {"peft_type": "LORA", "task_type": "CAUSAL_LM"}
    assert load_peft("LoRA", "sequence-classification")["task_type"] == "SEQ_CLS"
    assert "task_type" not in load_peft("lora", "masked-lm")  # peft has none: a plain PeftModel


def test_a_file_of_a_config_s_fields_keeps_them_and_defaults_to_lora(tmp_path: Path):
    path = tmp_path / "adapter.json"
    path.write_text(json.dumps({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "k_proj"]}))
    assert load_peft(str(path), "causal-lm") == {
        "r": 4,
        "lora_alpha": 8,
        "target_modules": ["q_proj", "k_proj"],
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
    }
    yaml_file = tmp_path / "ia3.yaml"
    yaml_file.write_text(
        "peft_type: IA3\ntarget_modules: [q_proj, down_proj]\nfeedforward_modules: [down_proj]\n"
    )
    assert load_peft(str(yaml_file), "causal-lm")["peft_type"] == "IA3"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (None, "no such file"),
        ("r: [unclosed", "not valid JSON/YAML"),
        ("- a list\n", "must hold a mapping"),
        ("r: 4\nno_such_field: 1\n", "invalid peft config for LoraConfig"),
        ("peft_type: NOPE\n", "unknown peft_type 'NOPE'"),
    ],
)
def test_a_bad_peft_value_is_a_usage_error_naming_the_option(tmp_path: Path, text, match):
    path = tmp_path / "adapter.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(UsageError, match=match) as info:
        load_peft(str(path), "causal-lm")
    assert info.value.field == "peft" and "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["missing.yaml", "bad.yaml"])
def test_a_bad_peft_value_ends_the_search_command_in_one_line_exit_2(
    tmp_path: Path, monkeypatch, capsys, value
):
    import autotune.driver.search
    from autotune.plan.build import plan_search

    # The search as far as its plan, which reads --peft (no worker, no store).
    monkeypatch.setattr(
        autotune.driver.search, "search", lambda config, **_: plan_search(config, open_store=False)
    )
    (tmp_path / "bad.yaml").write_text("r: 4\nno_such_field: 1\n")
    assert run("search", "-m", "tiny-llama", "--peft", str(tmp_path / value)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:") and "peft" in err, err


# -- the adapter as applied and exported ------------------------------------------------------------


def _lora_workload():
    workload = resolve_workload("tiny-llama", 16)
    workload.attach_adapter(load_peft("lora", workload.task))
    return workload


def test_the_resolved_adapter_names_the_modules_peft_inferred_and_loads_as_a_lora_config():
    workload = _lora_workload()
    resolved = workload.peft
    assert resolved is not None and sorted(resolved["target_modules"]) == ["q_proj", "v_proj"]
    config = peft.LoraConfig(**resolved)  # as the export hands it back
    assert config.task_type == "CAUSAL_LM" and set(config.target_modules) == {"q_proj", "v_proj"}
    assert exported_config(config) == resolved
    json.dumps(resolved)  # stored with the study: plain JSON


def test_every_model_of_the_workload_carries_the_adapter_its_base_weights_frozen():
    workload = _lora_workload()
    model = workload.build_model({})
    assert isinstance(model, peft.PeftModel)
    trainable, total = parameter_counts(model)
    assert 0 < trainable < total
    assert all("lora_" in name for name, p in model.named_parameters() if p.requires_grad)
    placeholder = workload.build_placeholder({})
    assert isinstance(placeholder, peft.PeftModel) and parameter_counts(placeholder) == (trainable, total)
    probe = workload.build_probe_model({})
    assert parameter_counts(probe) == (trainable, total)


@pytest.mark.parametrize("reentrant", [False, True])
def test_both_checkpointing_variants_give_the_adapter_gradients(reentrant: bool):
    # Reentrant checkpointing of a frozen base loses every gradient unless the inputs require
    # grad (transformers' activation_checkpointing_enable does it for input_ids models).
    torch.manual_seed(0)
    model = _lora_workload().build_model({})
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": reentrant})
    model.train()
    ids = torch.randint(0, 100, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad for name, p in model.named_parameters() if "lora_B" in name]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)


# -- memory estimate and FLOPs ----------------------------------------------------------------------


def test_gradients_and_optimizer_states_are_counted_for_trainable_parameters_only():
    n, trainable = 1_000_000, 10_000
    full = static_bytes(n, "fp32", "adamw_torch")
    assert full == n * (4 + 4 + 8)  # weights, gradients, two AdamW moments
    assert static_bytes(n, "fp32", "adamw_torch", trainable_params=None) == full  # full fine-tune unchanged
    assert static_bytes(n, "fp32", "adamw_torch", trainable_params=n) == full
    lora = static_bytes(n, "fp32", "adamw_torch", trainable_params=trainable)
    assert lora == n * 4 + trainable * (4 + 8)
    # Under autocast every weight, frozen or not, gets its half copy; gradients and moments do not.
    assert static_bytes(n, "bf16", "adamw_torch", trainable_params=trainable) == n * (4 + 2) + trainable * 12
    # Half-precision weights: 2 bytes per weight, per gradient and per moment.
    half = static_bytes(n, "bf16", "adamw_torch", weights_dtype="bf16", trainable_params=trainable)
    assert half == n * 2 + trainable * (2 + 4)
    # DDP's gradient buckets copy the gradients: the trainable ones.
    assert (
        static_bytes(n, "fp32", "sgd", world_size=2, trainable_params=trainable) == n * 4 + 2 * trainable * 4
    )
    estimate = estimate_memory(n, "fp32", "adamw_torch", 4, 100.0, 1000, trainable_params=trainable)
    assert estimate.static_bytes == lora and estimate.total_bytes == 1000 + lora + 400


def test_the_estimator_counts_the_adapter_s_parameters_apart(monkeypatch):
    from autotune.measure.estimator import MemoryEstimator

    workload = _lora_workload()
    estimator = MemoryEstimator(workload, "cpu")
    monkeypatch.setattr(MemoryEstimator, "baseline_bytes", 0)
    monkeypatch.setattr(MemoryEstimator, "activation_bytes_per_sample", lambda self, *a: 0.0)
    trainable, total = parameter_counts(workload.build_model({}))
    assert (estimator.trainable_params, estimator.n_params) == (trainable, total)
    values = {"precision": "fp32", "optim": "adamw_torch", "per_device_train_batch_size": 2}
    assert estimator.estimate(values).static_bytes == total * DTYPE_BYTES["fp32"] + trainable * (4 + 8)


def test_frozen_weights_cost_four_flops_per_token_trainable_six():
    assert flops_per_token(1000, 2, 8, 16) == 6000 + 12 * 2 * 8 * 16  # a full fine-tune: 6N + 12LHT
    assert flops_per_token(1000, 2, 8, 16, trainable_params=1000) == flops_per_token(1000, 2, 8, 16)
    assert flops_per_token(1000, 2, 8, 16, trainable_params=100) == 6 * 100 + 4 * 900 + 12 * 2 * 8 * 16


# -- the reentrant checkpointing knob ---------------------------------------------------------------


def test_reentrant_checkpointing_lands_in_the_checkpointing_kwargs_merged_with_every_n_layers():
    knob = CATALOGUE["gradient_checkpointing_reentrant"]
    assert knob.kind == "bool" and knob.requires == ("activation_checkpointing", (True,))
    assert trial_kwargs({"gradient_checkpointing_reentrant": True})[0] == {
        "activation_checkpointing_kwargs": {"use_reentrant": True}
    }
    both = {
        "activation_checkpointing": True,
        "checkpoint_every_n_layers": 2,
        "gradient_checkpointing_reentrant": False,
    }
    args = trial_kwargs(both)[0]
    assert args["activation_checkpointing_kwargs"] == {"every_n_layers": 2, "use_reentrant": False}
    reversed_order = dict(reversed(list(both.items())))
    assert trial_kwargs(reversed_order)[0]["activation_checkpointing_kwargs"] == {
        "every_n_layers": 2,
        "use_reentrant": False,
    }


def test_the_defaults_read_reentrant_from_the_checkpointing_kwargs():
    off = knob_defaults({}, sdpa=True, cuda=False)
    assert "gradient_checkpointing_reentrant" not in off  # only with checkpointing on
    on = knob_defaults({"activation_checkpointing": True}, sdpa=True, cuda=False)
    assert on["gradient_checkpointing_reentrant"] is False  # transformers' own default
    given = {"activation_checkpointing": True, "activation_checkpointing_kwargs": {"use_reentrant": True}}
    assert knob_defaults(given, sdpa=True, cuda=False)["gradient_checkpointing_reentrant"] is True


def test_the_parameters_line_writes_counts_as_people_do_and_only_under_an_adapter() -> None:
    from autotune.export.config import parameters_text

    line = parameters_text({"trainable": 3_584, "total": 358_208})
    assert line is not None and line.startswith("parameters: 3,584 trainable of 358k (1.0%, a peft adapter)")
    assert "no weight-gradient FLOPs for the frozen weights" in line
    big = parameters_text({"trainable": 20_971_520, "total": 7_615_616_512})
    assert big is not None and big.startswith("parameters: 20.97M trainable of 7.62B (0.3%")
    assert parameters_text({"trainable": 10, "total": 10}) is None  # every weight trained: no line


def test_a_trainer_whose_model_init_returns_a_peft_model_carries_its_adapter_to_the_export(tmp_path: Path):
    # Each trial calls model_init afresh; the adapter it applies is read from the model the Trainer
    # built with it, and is what the export hands back (peft.LoraConfig(**...)).
    import datasets
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from autotune.driver.tune import user_workload
    from autotune.workloads.presets import PRESETS, preset_config

    config = preset_config(PRESETS["tiny-llama"])

    def model_init():
        base = AutoModelForCausalLM.from_config(config)
        return peft.get_peft_model(
            base, peft.LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=["q_proj", "o_proj"])
        )

    rows = [[1, 2, 3, 4]] * 8
    train = datasets.Dataset.from_dict({"input_ids": rows, "labels": rows})
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[])
    workload = user_workload(Trainer(model_init=model_init, args=args, train_dataset=train))
    assert workload.peft is not None
    loaded = peft.LoraConfig(**workload.peft)
    assert loaded.r == 4 and set(loaded.target_modules) == {"q_proj", "o_proj"}
    model = workload.build_model({})
    assert isinstance(model, peft.PeftModel)
    trainable, total = parameter_counts(model)
    assert 0 < trainable < total
