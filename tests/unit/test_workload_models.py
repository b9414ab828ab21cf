"""The models a worker builds besides its trial's: the placeholder a Trainer holds until the trial
builds its own (no storage, so no second full build), and the memory probe's model (the trial's
shape, tied embeddings tied)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from autotune.workloads.user import UserWorkload
from autotune.workloads.workload import Workload


def _tied() -> Qwen2Config:
    return Qwen2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=500,
        tie_word_embeddings=True,
    )


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_the_placeholder_is_the_trial_models_class_and_shape_without_storage() -> None:
    workload = Workload("folder", "causal-lm", _tied(), 16)
    real = workload.build_model({})
    placeholder = workload.build_placeholder({"attn_implementation": "eager"})
    assert placeholder is not None
    assert type(placeholder) is type(real) and _count(placeholder) == _count(real)
    assert all(p.is_meta for p in placeholder.parameters())
    assert placeholder.config._attn_implementation == "eager"


def test_a_users_own_model_gets_no_placeholder() -> None:
    model = AutoModelForCausalLM.from_config(_tied())
    workload = UserWorkload("mine", "causal-lm", model.config, 16, model=model)
    assert workload.build_placeholder({}) is None


def test_the_probe_model_ties_what_the_trial_model_ties() -> None:
    workload = Workload("folder", "causal-lm", _tied(), 16)
    real, probe = workload.build_model({}), workload.build_probe_model({})
    assert _count(probe) == _count(real)  # untied it held a second 500 x 32 embedding, and its gradient
    assert probe.get_output_embeddings().weight is probe.get_input_embeddings().weight
    assert all(not p.is_meta and not p.any() for p in probe.parameters())  # zero-filled, memory touched


# -- random initialisation: transformers' own, each weight once ------------------------------------

_SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 256,
    "n_layer": 2,
    "n_head": 4,
    "n_embd": 64,
    "num_labels": 3,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
_ARCHITECTURES = [
    ("gpt2", "causal-lm"),
    ("gpt2", "sequence-classification"),
    ("llama", "causal-lm"),
    ("qwen2", "causal-lm"),
    ("gemma2", "causal-lm"),
    ("mixtral", "causal-lm"),  # experts held as bare nn.Parameters
    ("gpt_neox", "causal-lm"),
    ("opt", "causal-lm"),
    ("bloom", "causal-lm"),
    ("falcon", "causal-lm"),
    ("bert", "masked-lm"),
    ("bert", "sequence-classification"),
    ("roberta", "masked-lm"),  # position and token-type ids: non-persistent buffers
    ("distilbert", "sequence-classification"),
    ("deberta-v2", "masked-lm"),
    ("albert", "masked-lm"),
    ("electra", "sequence-classification"),
    ("modernbert", "masked-lm"),
]


def _both(model_type: str, task: str, **extra: object) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The model as `from_config` builds it, and as a workload builds it."""
    import transformers
    from transformers import AutoConfig

    from autotune.workloads.tasks import AUTO_CLASS

    config = AutoConfig.for_model(model_type, **_SMALL, **extra)
    torch.manual_seed(0)
    expected = getattr(transformers, AUTO_CLASS[task]).from_config(config)
    config = AutoConfig.for_model(model_type, **_SMALL, **extra)
    torch.manual_seed(0)
    built = Workload("folder", task, config, 16).build_model({})
    return expected, built


def _ties(model: torch.nn.Module) -> set[frozenset[str]]:
    named = dict(model.named_parameters(remove_duplicate=False))
    return {frozenset(n for n, p in named.items() if p.data_ptr() == q.data_ptr()) for q in named.values()}


@pytest.mark.parametrize(("model_type", "task"), _ARCHITECTURES)
def test_a_random_model_is_from_configs_model(model_type: str, task: str) -> None:
    expected, built = _both(model_type, task)
    assert type(built) is type(expected)
    want, got = dict(expected.named_parameters()), dict(built.named_parameters())
    assert want.keys() == got.keys()
    for name, p in want.items():
        q = got[name].detach()
        assert q.shape == p.shape and q.dtype == p.dtype, name
        assert torch.isfinite(q).all(), name
        p = p.detach()
        if p.numel() >= 256 and p.float().std() > 0:  # drawn at random: the same distribution
            assert 0.8 < float(q.float().std() / p.float().std()) < 1.25, name
            assert abs(float(q.float().mean() - p.float().mean())) < 0.2 * float(p.float().std()), name
        elif p.numel() >= 256 or p.float().std() == 0:  # constant (norms' ones, biases' zeros)
            assert torch.equal(q, p), name
    buffers, built_buffers = dict(expected.named_buffers()), dict(built.named_buffers())
    assert buffers.keys() == built_buffers.keys()
    for name, b in buffers.items():  # rotary frequencies, position ids, masks: computed, not drawn
        assert torch.equal(built_buffers[name], b), name
    assert _ties(built) == _ties(expected)


def test_a_random_model_keeps_the_configs_dtype_and_the_trials_attention() -> None:
    expected, built = _both("llama", "causal-lm", dtype="bfloat16")
    dtypes = {p.dtype for p in built.parameters()}
    assert dtypes == {p.dtype for p in expected.parameters()} == {torch.bfloat16}
    config = Qwen2Config(**_tied().to_diff_dict())
    model = Workload("folder", "causal-lm", config, 16).build_model({"attn_implementation": "eager"})
    assert model.config._attn_implementation == "eager"
    assert model.config._name_or_path == config._name_or_path  # not from_pretrained(None)'s "None"


def test_a_random_model_is_built_on_the_meta_device_and_initialised_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Torch's own initialisation in each constructor runs on meta tensors (free): the memory is
    written once, by transformers' `_init_weights`; `from_config` writes it twice."""
    seen: list[str] = []
    real = torch.nn.init.kaiming_uniform_

    def recording(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        seen.append(tensor.device.type)
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.nn.init, "kaiming_uniform_", recording)
    Workload("folder", "causal-lm", _tied(), 16).build_model({})
    assert seen and set(seen) == {"meta"}
    seen.clear()
    AutoModelForCausalLM.from_config(_tied())
    assert "cpu" in seen  # the test can tell the two apart


def test_a_class_from_outside_transformers_is_built_by_its_own_constructor() -> None:
    """A registered class's `_init_weights` need not cover what its constructor sets (a bare
    parameter here): such a model is `from_config`'s, not initialised from an empty checkpoint."""
    from transformers import AutoConfig, PretrainedConfig, PreTrainedModel

    class ScaleConfig(PretrainedConfig):
        model_type = "autotune-test-scale"

    class ScaleModel(PreTrainedModel):
        config_class = ScaleConfig

        def __init__(self, config: ScaleConfig) -> None:
            super().__init__(config)
            self.scale = torch.nn.Parameter(torch.full((4,), 3.0))
            self.post_init()

    AutoConfig.register("autotune-test-scale", ScaleConfig, exist_ok=True)
    AutoModelForCausalLM.register(ScaleConfig, ScaleModel, exist_ok=True)
    model = Workload("folder", "causal-lm", ScaleConfig(), 16).build_model({})
    assert type(model) is ScaleModel and torch.equal(model.scale.detach(), torch.full((4,), 3.0))


def test_building_a_model_looks_up_its_class_without_listing_every_architecture() -> None:
    """The truth of transformers' lazy model mapping lists its keys, which imports every model
    type's config module (most of a fresh worker's set-up): the class is looked up by its config
    alone."""
    from autotune.workloads.workload import random_init

    class Lookup(dict):  # type: ignore[type-arg]
        def get(self, key: object, default: object) -> object:  # as the lazy mapping's: no default
            return super().get(key, default)

        def __bool__(self) -> bool:
            raise AssertionError("the whole mapping was listed")

        def __len__(self) -> int:
            raise AssertionError("the whole mapping was listed")

    config = _tied()
    auto = type("Auto", (), {"_model_mapping": Lookup({type(config): Qwen2ForCausalLM})})
    model = random_init(auto, config, {}, {})
    assert type(model) is Qwen2ForCausalLM
