"""Every knob value a CPU can run takes effect inside training, and the next trial does not inherit it.

The trials are enqueued in an order where each knob changes between neighbours, so a value left
over from the previous trial (the stock Trainer's checkpointing and `setattr` behaviour) fails.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import autotune
from tests.helpers import FAST, IN_PROCESS, KnobProbe, write_space

TRIALS: list[dict[str, Any]] = [
    {
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "precision": "fp32",
        "optim": "adamw_torch",
        "attn_implementation": "eager",
        "activation_checkpointing": False,
        "torch_compile": "off",
    },
    {
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 2,
        "precision": "bf16",
        "optim": "adamw_torch_fused",
        "attn_implementation": "sdpa",
        "activation_checkpointing": True,
        "torch_compile": "off",
    },
    {
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "precision": "fp32",
        "optim": "sgd",
        "attn_implementation": "eager",
        "activation_checkpointing": False,
        "torch_compile": "aot_eager",
    },
    {
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "precision": "bf16",
        "optim": "adafactor",
        "attn_implementation": "sdpa",
        "activation_checkpointing": True,
        "torch_compile": "off",
    },
    {
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "precision": "fp32",
        "optim": "adamw_torch_fused",
        "attn_implementation": "eager",
        "activation_checkpointing": False,
        "torch_compile": "inductor",
        "torch_compile_mode": "default",
        "dataloader_num_workers": 2,
    },
    {
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "precision": "fp32",
        "optim": "rmsprop",
        "attn_implementation": "sdpa",
        "activation_checkpointing": False,
        "torch_compile": "off",
    },
]
WORKERS = [t.get("dataloader_num_workers", 0) for t in TRIALS]

OPTIMIZER_CLASS = {
    "adamw_torch": ("AdamW", False),
    "adamw_torch_fused": ("AdamW", True),
    "sgd": ("SGD", False),
    "adafactor": ("Adafactor", False),
    "rmsprop": ("RMSprop", False),
}
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], list[str], Any]:
    folder = tmp_path_factory.mktemp("knobs")
    names = dict.fromkeys(name for t in TRIALS for name in t)
    knobs = {name: list(dict.fromkeys(t[name] for t in TRIALS if name in t)) for name in names}
    knobs["dataloader_num_workers"] = [0, 2]
    space = write_space(folder, knobs)
    enqueue = [{"dataloader_num_workers": 0, **t} for t in TRIALS]
    probe = KnobProbe()
    compiled_with: list[tuple[str, str | None]] = []
    real_compile = torch.compile

    def spy_compile(model: Any, *args: Any, **kwargs: Any) -> Any:
        compiled_with.append((kwargs.get("backend"), kwargs.get("mode")))
        if kwargs.get("backend") == "inductor":
            # What the trial asked for is recorded above; dynamo still traces the model, through
            # aot_eager: inductor's cold C++ build (most of a minute here) adds nothing this module
            # checks. Inductor's own compile is checked in test_compile_cache.py.
            kwargs = {**kwargs, "backend": "aot_eager", "mode": None}
        return real_compile(model, *args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(torch, "compile", spy_compile)
    try:
        result = autotune.search(
            model="tiny-gpt2",
            space=space,
            trials=len(TRIALS),
            storage=f"sqlite:///{folder / 'k.db'}",
            seq_len=32,
            **IN_PROCESS,
            callbacks=[probe],
            enqueue=enqueue,
        )
    finally:
        mp.undo()
    return probe.trials, compiled_with, result


def test_every_trial_completed_with_its_own_params(probed: Any) -> None:
    seen, _, result = probed
    assert len(seen) == len(TRIALS)
    by_number = {t.number: t for t in result.trials}
    for number, wanted in enumerate(TRIALS):
        assert by_number[number].state == "COMPLETE", by_number[number].message
        assert by_number[number].params == {"dataloader_num_workers": 0, **wanted}


@pytest.mark.parametrize("index", range(len(TRIALS)))
def test_knobs_took_effect_inside_training(probed: Any, index: int) -> None:
    seen, _, _ = probed
    wanted, got = TRIALS[index], seen[index]
    assert (got["optimizer_class"], got["fused"]) == OPTIMIZER_CLASS[wanted["optim"]]
    assert got["attn_implementation"] == wanted["attn_implementation"]
    assert got["checkpointing"] is wanted["activation_checkpointing"]
    assert got["grad_accum"] == wanted["gradient_accumulation_steps"]
    assert got["batch_size"] == wanted["per_device_train_batch_size"]
    assert got["output_dtypes"] == {DTYPE[wanted["precision"]]}
    assert got["traced"] is (wanted["torch_compile"] != "off")
    assert got["dataloader_workers"] == WORKERS[index]


def test_compile_used_the_chosen_backend_only_when_asked(probed: Any) -> None:
    _, compiled_with, _ = probed
    # accelerate's dynamo plugin passes only values that differ from its defaults: mode "default"
    # reaches torch.compile as no mode at all, which is the same thing.
    wanted = [
        (
            t["torch_compile"],
            None if t.get("torch_compile_mode") == "default" else t.get("torch_compile_mode"),
        )
        for t in TRIALS
        if t["torch_compile"] != "off"
    ]
    assert compiled_with == wanted


def test_stored_training_args_match_the_params(probed: Any) -> None:
    _, _, result = probed
    for trial in result.trials:
        assert ("torch_compile_mode" in trial.params) is (trial.params["torch_compile"] == "inductor")
        stored = trial.attrs["training_args"]
        assert stored["per_device_train_batch_size"] == trial.params["per_device_train_batch_size"]
        assert stored["bf16"] is (trial.params["precision"] == "bf16")
        assert stored["torch_compile"] is (trial.params["torch_compile"] != "off")
        assert trial.attrs["model_kwargs"] == {"attn_implementation": trial.params["attn_implementation"]}


def test_values_survive_the_trip_through_a_fixed_trial(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Non-zero DDP ranks receive the trial as optuna.trial.FixedTrial(params); the finalists are
    # re-measured the same way. The values must reach training exactly as on rank 0.
    from autotune.measure.callback import ThroughputCallback
    from autotune.plan.build import plan_search
    from autotune.progress import Reporter
    from autotune.trial.trainer import AutotuneTrainer

    folder = tmp_path_factory.mktemp("fixed")
    knobs = {
        "per_device_train_batch_size": [4, 8],
        "precision": ["fp32", "bf16"],
        "optim": ["adamw_torch", "adamw_torch_fused"],
        "attn_implementation": ["eager", "sdpa"],
        "activation_checkpointing": [False, True],
    }
    config = autotune.RunConfig(model="tiny-gpt2", space=write_space(folder, knobs), seq_len=16, measure=FAST)
    plan = plan_search(config, open_store=False)
    probe = KnobProbe()
    base = {"output_dir": str(folder), "max_steps": FAST.step_budget, "report_to": "none", "use_cpu": True}
    base.update(save_strategy="no", logging_strategy="no", disable_tqdm=True)
    trainer = AutotuneTrainer(
        plan=plan,
        base_args=base,
        measurement=ThroughputCallback(FAST, 16, Reporter()),
        reporter=Reporter(),
        callbacks=[probe],
    )
    first = {k: v[1] for k, v in knobs.items()}
    second = {k: v[0] for k, v in knobs.items()}
    for number, params in enumerate((first, second)):
        measured = trainer.measure_config(params, number)
        assert measured["tokens_per_s"] > 0
    for seen, params in zip(probe.trials, (first, second), strict=True):
        assert seen["batch_size"] == params["per_device_train_batch_size"]
        assert seen["output_dtypes"] == {DTYPE[params["precision"]]}
        assert seen["fused"] is (params["optim"] == "adamw_torch_fused")
        assert seen["attn_implementation"] == params["attn_implementation"]
        assert seen["checkpointing"] is params["activation_checkpointing"]


def test_each_trial_builds_its_model_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Trainer's own model (made in its __init__, before any trial) is a placeholder without
    storage; the full builds are the trials' own, one each (the memory probe's, and the estimate's
    count of parameters on the meta device, are counted apart)."""
    from autotune.workloads.workload import Workload

    built: list[str] = []
    real_build, real_probe, real_placeholder = (
        Workload.build_model,
        Workload.build_probe_model,
        Workload.build_placeholder,
    )
    probing: list[bool] = []

    def build_model(self: Workload, kwargs: dict[str, Any]) -> Any:
        model = real_build(self, kwargs)
        meta = next(model.parameters()).is_meta  # the estimate counting parameters: no storage
        built.append("probe" if probing else "meta" if meta else "full")
        return model

    def build_probe_model(self: Workload, kwargs: dict[str, Any]) -> Any:
        probing.append(True)
        try:
            return real_probe(self, kwargs)
        finally:
            probing.pop()

    def build_placeholder(self: Workload, kwargs: dict[str, Any]) -> Any:
        built.append("placeholder")
        return real_placeholder(self, kwargs)

    monkeypatch.setattr(Workload, "build_model", build_model)
    monkeypatch.setattr(Workload, "build_probe_model", build_probe_model)
    monkeypatch.setattr(Workload, "build_placeholder", build_placeholder)
    space = write_space(tmp_path, {"per_device_train_batch_size": [2, 4]})
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=2,
        storage=f"sqlite:///{tmp_path / 'once.db'}",
        seq_len=32,
        **IN_PROCESS,
    )
    trained = [t for t in result.trials if t.state == "COMPLETE" and not t.message]  # not reused
    assert len(trained) == 2
    assert built.count("full") == len(trained), built
    assert built.count("placeholder") >= 1 and built.index("placeholder") < built.index("full"), built
