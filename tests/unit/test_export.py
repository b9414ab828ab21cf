"""`autotune export`: the answer it exports (with and without a new memory cap) and every format."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import optuna
import pytest
import typer
import yaml

from autotune import cli
from autotune.answer.decide import study_answer
from autotune.answer.model import BEATS_DEFAULTS, NO_TRIAL, NOT_REMEASURED
from autotune.cli._export import export_command
from autotune.errors import UsageError
from autotune.export.config import export_config, resolve_cap
from autotune.export.formats import notes, to_flags, to_json, to_python, to_yaml
from autotune.export.launchers import to_accelerate
from autotune.export.render import FORMATS, render
from autotune.measure.stats import t95
from autotune.space.knobs import ATTENTION, COMPILE_BACKENDS, OPTIMIZERS, PRECISIONS
from autotune.space.mapping import trial_kwargs
from autotune.store.session import StudyStore
from autotune.store.trials import summarize_trial

MiB = 2**20
STUDY = "tiny-gpt2-cpu-seq128"
WINNER_ROUNDS = [30800.0, 31000.0, 31200.0]  # the winner's re-measured tokens/s, about 31,000
DISTRIBUTIONS = {
    "per_device_train_batch_size": optuna.distributions.CategoricalDistribution((4, 8, 16, 32)),
    "gradient_accumulation_steps": optuna.distributions.CategoricalDistribution((1, 2)),
    "precision": optuna.distributions.CategoricalDistribution(PRECISIONS),
    "optim": optuna.distributions.CategoricalDistribution(OPTIMIZERS),
    "torch_compile": optuna.distributions.CategoricalDistribution(COMPILE_BACKENDS),
    "attn_implementation": optuna.distributions.CategoricalDistribution(ATTENTION),
    "activation_checkpointing": optuna.distributions.CategoricalDistribution((False, True)),
    "torch_compile_mode": optuna.distributions.CategoricalDistribution(("default", "max-autotune")),
}


def trial_spec(
    bs: int,
    ga: int,
    precision: str,
    optim: str,
    compile_: str,
    attn: str,
    ckpt: bool,
    tokens: float | None,
    peak_mib: float | None,
    *,
    state: str = "COMPLETE",
    reason: str | None = None,
    loss: float = 7.5,
    duplicate_of: int | None = None,
    extra_model: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One trial shaped like the ones the search stores."""
    params: dict[str, Any] = {
        "per_device_train_batch_size": bs,
        "gradient_accumulation_steps": ga,
        "precision": precision,
        "optim": optim,
        "torch_compile": compile_,
        "attn_implementation": attn,
        "activation_checkpointing": ckpt,
    }
    args, model = trial_kwargs(params)
    attrs: dict[str, Any] = {
        "training_args": args,
        "model_kwargs": {**model, **(extra_model or {})},
        "tokens_per_s": tokens,
        "samples_per_s": None if tokens is None else tokens / 128,
        "rel_ci_halfwidth": None if tokens is None else 0.012,
        "peak_memory_bytes": None if peak_mib is None else int(peak_mib * MiB),
        "feasible": state == "COMPLETE" and reason is None,
        "reason": reason,
        "trained": True,
        "train_loss": loss,
    }
    if duplicate_of is not None:
        attrs["duplicate_of"] = duplicate_of
        attrs["trained"] = False
    return {"params": params, "attrs": attrs, "state": state}


def make_study(
    folder: Path | None,
    specs: list[dict[str, Any]],
    *,
    winner: int | None = None,
    baseline: dict[str, Any] | None = None,
    base_args: dict[str, Any] | None = None,
    task: str = "causal-lm",
    name: str = STUDY,
    extra_attrs: dict[str, Any] | None = None,
) -> optuna.Study:
    """A finished autotune-like study in a SQLite file under `folder` (in memory without one).

    With a `winner`, the finalists' rounds the search records beside it: the winner re-measured
    over three rounds (median 31,000 tokens/s), and the baseline beside it when one is given."""
    storage = f"sqlite:///{folder / 'export.db'}" if folder is not None else optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    for spec in specs:
        complete = spec["state"] == "COMPLETE"
        study.add_trial(
            optuna.trial.create_trial(
                params=spec["params"],
                distributions={k: DISTRIBUTIONS[k] for k in spec["params"]},
                value=spec["attrs"]["tokens_per_s"] if complete else None,
                user_attrs=spec["attrs"],
                state=optuna.trial.TrialState[spec["state"]],
            )
        )
    attrs: dict[str, Any] = {
        "run_config": {"model": "tiny-gpt2", "space": "cpu", "seq_len": None, "memory_cap": "800MiB"},
        "workload": {"model": "tiny-gpt2", "model_type": "gpt2", "task": task, "seq_len": 128},
        "base_args": base_args or {},
        "memory_cap": "800MiB",
        "device": {"device": "cpu", "memory_bytes": 2000 * MiB},
        **(extra_attrs or {}),
    }
    if winner is not None:
        attrs["finalists"] = [{"number": winner, "tokens_per_s": WINNER_ROUNDS, "rounds": [1, 2, 3]}]
        if baseline is not None:
            rounds = [baseline["tokens_per_s"]] * 3
            attrs["finalists"].append({"number": -1, "tokens_per_s": rounds, "rounds": [1, 2, 3]})
    if baseline is not None:
        attrs["baseline"] = baseline
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    return study


def standard_specs() -> list[dict[str, Any]]:
    return [
        # 0: the re-measured winner
        trial_spec(8, 2, "bf16", "adamw_torch", "inductor", "sdpa", True, 30000.0, 700),
        # 1: fastest, but over the study's 800 MiB cap: fully measured
        trial_spec(16, 1, "bf16", "adamw_torch_fused", "off", "sdpa", False, 40000.0, 900,
                   state="PRUNED", reason="over_memory_cap"),
        # 2: slow and small
        trial_spec(4, 1, "fp32", "sgd", "off", "eager", True, 20000.0, 500),
        # 3: a reused duplicate of 2 (never exported itself)
        trial_spec(4, 1, "fp32", "sgd", "off", "eager", True, 50000.0, 400, duplicate_of=2),
        # 4: pruned for another reason: not a candidate under any cap
        trial_spec(4, 2, "bf16", "sgd", "off", "eager", False, 60000.0, 300,
                   state="PRUNED", reason="timeout"),
        # 5: a non-finite loss (pruned, though its window was measured)
        trial_spec(8, 2, "fp32", "sgd", "off", "eager", False, 55000.0, 350, loss=float("nan"),
                   state="PRUNED", reason="nan_loss"),
        # 6: mid-size
        trial_spec(8, 1, "fp32", "adamw_torch", "off", "eager", False, 25000.0, 600),
        # 7: skipped before training: no measurement at all
        trial_spec(32, 2, "bf16", "adamw_torch", "off", "sdpa", False, None, None,
                   state="PRUNED", reason="over_estimate"),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, str]:
    """The standard study in a SQLite file (made once: creating the schema is the slow part)."""
    folder = tmp_path_factory.mktemp("store")
    return make_study(folder, standard_specs(), winner=0), f"sqlite:///{folder / 'export.db'}"


@pytest.fixture
def study() -> optuna.Study:
    return make_study(None, standard_specs(), winner=0)


# -- selection ---------------------------------------------------------------------------------


def chosen(study: optuna.Study, cap_bytes: int | None) -> int | None:
    """The trial the study's answer hands back (None: the defaults)."""
    answer = study_answer(StudyStore(study), cap_bytes)
    assert answer.choice is not None, answer.verdict
    return answer.choice.trial


def test_no_cap_picks_the_winner(study: optuna.Study) -> None:
    answer = study_answer(StudyStore(study), None)
    assert answer.choice is not None and answer.choice.trial == 0
    assert answer.choice.remeasured  # the finalists' rounds, not the search window


def test_no_cap_without_winner_picks_fastest_feasible(tmp_path: Path) -> None:
    # 1 is over the study's cap, 3 a duplicate, 4 and 5 pruned: 0 is the fastest that counts
    answer = study_answer(StudyStore(make_study(None, standard_specs())), None)
    assert answer.choice is not None and answer.choice.trial == 0
    assert answer.rule == NOT_REMEASURED and not answer.choice.remeasured


def test_cap_ignores_a_completed_trial_with_a_non_finite_loss(tmp_path: Path) -> None:
    specs = [
        *standard_specs(),
        trial_spec(4, 2, "fp32", "sgd", "off", "sdpa", False, 90000.0, 200, loss=float("inf")),
    ]
    assert chosen(make_study(None, specs, winner=0), 650 * MiB) == 6


def test_cap_keeps_the_winner_when_it_fits(study: optuna.Study) -> None:
    # 1 is faster in its search window and fits 1 GiB, but the re-measured winner is ranked first
    assert chosen(study, 1024 * MiB) == 0
    assert chosen(study, 700 * MiB) == 0  # <= cap, not < cap
    assert study_answer(StudyStore(study), 700 * MiB).memory_cap_bytes == 700 * MiB


def test_smaller_cap_reselects_another_trial(study: optuna.Study) -> None:
    assert chosen(study, 650 * MiB) == 6
    assert chosen(study, 550 * MiB) == 2


def test_larger_cap_admits_trials_pruned_only_for_the_old_cap(tmp_path: Path) -> None:
    study = make_study(None, standard_specs())  # no winner recorded
    assert chosen(study, 1000 * MiB) == 1
    assert chosen(study, 850 * MiB) == 0


def test_no_trial_fits_names_cap_and_smallest_peak(study: optuna.Study) -> None:
    answer = study_answer(StudyStore(study), 100 * MiB)
    assert answer.rule == NO_TRIAL and answer.choice is None  # no baseline to fall back on
    with pytest.raises(UsageError) as info:
        export_config(StudyStore(study), answer, cap_text="100MiB")
    error = info.value
    assert "100MiB" in error.message
    assert "500 MiB" in error.message and "trial 2" in error.message
    assert error.hint is not None and "autotune search" in error.hint
    assert "--memory-cap 100MiB" in error.hint
    assert error.exit_code == 2


def test_study_without_feasible_trial_is_a_usage_error(tmp_path: Path) -> None:
    spec = trial_spec(8, 1, "fp32", "sgd", "off", "eager", False, None, None, state="PRUNED", reason="oom")
    study = make_study(None, [spec])
    with pytest.raises(UsageError, match="no feasible completed trial"):
        export_config(StudyStore(study), study_answer(StudyStore(study), None))


def test_fractional_cap_is_of_the_study_device(study: optuna.Study) -> None:
    assert resolve_cap(StudyStore(study), "50%") == 1000 * MiB
    assert resolve_cap(StudyStore(study), "600MiB") == 600 * MiB
    with pytest.raises(UsageError):
        resolve_cap(StudyStore(study), "lots")


# -- the exported config -----------------------------------------------------------------------


def _config(study: optuna.Study, number: int) -> dict[str, Any]:
    return export_config(StudyStore(study), summarize_trial(study.trials[number]))


def test_config_keeps_what_the_search_set(study: optuna.Study) -> None:
    config = _config(study, 0)
    assert config["training_args"] == {
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 2,
        "optim": "adamw_torch",
        "bf16": True,
        "tf32": False,
        "torch_compile": True,
        "torch_compile_backend": "inductor",
        "activation_checkpointing": True,
    }
    assert config["model_kwargs"] == {"attn_implementation": "sdpa"}
    expected = config["expected"]
    assert expected["tokens_per_s"] == 30000.0
    # a trial chosen by the caller: its search window's figures, with the window's own interval
    assert expected["remeasured"] is False and expected["rounds"] is None
    assert expected["tokens_per_s_interval"] == pytest.approx([30000.0 * 0.988, 30000.0 * 1.012])
    assert expected["peak_memory_bytes"] == 700 * MiB
    assert expected["speedup_over_baseline"] is None
    assert (expected["trial"], expected["study"], expected["model"]) == (0, STUDY, "tiny-gpt2")


def test_config_drops_defaults_but_keeps_the_batch_split(study: optuna.Study) -> None:
    args = _config(study, 6)["training_args"]
    # bs 8, accumulation 1 are TrainingArguments defaults: kept anyway
    assert args["per_device_train_batch_size"] == 8 and args["gradient_accumulation_steps"] == 1
    for dropped in ("bf16", "fp16", "torch_compile", "torch_compile_backend", "activation_checkpointing"):
        assert dropped not in args


def test_config_merges_base_args(tmp_path: Path) -> None:
    base = {"learning_rate": 1e-4, "weight_decay": 0.0, "per_device_train_batch_size": 2}
    study = make_study(None, standard_specs(), winner=0, base_args=base)
    args = _config(study, 0)["training_args"]
    assert args["learning_rate"] == 1e-4
    assert "weight_decay" not in args  # the default
    assert args["per_device_train_batch_size"] == 8  # the trial's value wins


def test_a_trial_that_turns_checkpointing_off_over_a_base_alias_exports_it_off() -> None:
    # a base config (as a store may hold it) that checkpoints under transformers 5's deprecated
    # name; trial 6 turns checkpointing off, trial 0 keeps it on
    from transformers import TrainingArguments

    study = make_study(None, standard_specs(), winner=0, base_args={"gradient_checkpointing": True})
    for number, on in ((6, False), (0, True)):
        args = _config(study, number)["training_args"]
        assert "gradient_checkpointing" not in args
        built = TrainingArguments(output_dir="unused", use_cpu=True, **args)
        assert built.activation_checkpointing is on, (number, args)


def test_dtype_only_when_the_base_config_asked(tmp_path: Path) -> None:
    spec = trial_spec(
        8, 1, "bf16", "sgd", "off", "sdpa", False, 1000.0, 100, extra_model={"dtype": "bfloat16"}
    )
    plain = make_study(None, [spec])
    assert _config(plain, 0)["model_kwargs"] == {"attn_implementation": "sdpa"}
    asked = make_study(
        tmp_path, [spec], name="asked", extra_attrs={"base_model_kwargs": {"dtype": "bfloat16"}}
    )
    assert _config(asked, 0)["model_kwargs"] == {"dtype": "bfloat16", "attn_implementation": "sdpa"}


def test_speedup_over_baseline(tmp_path: Path) -> None:
    baseline = {"tokens_per_s": 20000.0, "peak_memory_bytes": 600 * MiB, "training_args": {}}
    study = make_study(None, standard_specs(), winner=0, baseline=baseline)
    config = _config(study, 0)
    assert config["expected"]["speedup_over_baseline"] == 1.5
    for fmt in ("yaml", "accelerate", "python"):
        assert "1.50x the baseline" in render(config, fmt)
    assert "1.50x the baseline" in "\n".join(notes(config, "flags"))
    assert json.loads(to_json(config))["expected"]["speedup_over_baseline"] == 1.5


def test_the_answer_exports_the_remeasured_figures(tmp_path: Path) -> None:
    # The winner re-measured beside the baseline (20,000 tokens/s a round): the exported figures are
    # its re-measured mean and the paired speedup, with their intervals, not its search window.
    baseline = {"tokens_per_s": 20000.0, "peak_memory_bytes": 600 * MiB}
    study = make_study(None, standard_specs(), winner=0, baseline=baseline)
    answer = study_answer(StudyStore(study))
    assert answer.rule == BEATS_DEFAULTS and answer.choice is not None and answer.choice.trial == 0
    config = export_config(StudyStore(study), answer)
    expected = config["expected"]
    assert (expected["rule"], expected["verdict"]) == (BEATS_DEFAULTS, answer.verdict)
    assert expected["remeasured"] is True and expected["rounds"] == 3
    assert expected["tokens_per_s"] == pytest.approx(statistics.geometric_mean(WINNER_ROUNDS))
    # the 95% t interval of the rounds' geometric mean, its noise pooled over both contestants'
    # rounds (the baseline's three alike: 4 degrees of freedom, the winner's spread alone)
    logs = [math.log(v) for v in WINNER_ROUNDS]
    pooled = math.sqrt(sum((y - statistics.fmean(logs)) ** 2 for y in logs) / 4)
    half = t95(4) * pooled / math.sqrt(3)
    low, high = expected["tokens_per_s_interval"]
    assert (low, high) == pytest.approx([math.exp(statistics.fmean(logs) + d) for d in (-half, half)])
    assert expected["speedup_over_baseline"] == pytest.approx(1.55, abs=1e-3)
    assert expected["speedup_interval"][0] > 1.5 and expected["beats_baseline"] is True
    assert expected["baseline_tokens_per_s"] == 20000.0
    for fmt in ("yaml", "accelerate", "python"):
        text = render(config, fmt)
        assert (
            f"31,000 tokens/s (re-measured mean, 95% interval {low:,.0f}-{high:,.0f} over 3 rounds)" in text
        )
        assert "1.55x the baseline" in text and "the baseline at 20,000 tokens/s" in text, fmt


# -- renderers ---------------------------------------------------------------------------------


def test_json_and_yaml_hold_the_same_config(study: optuna.Study) -> None:
    config = _config(study, 0)
    from_json = json.loads(to_json(config))
    assert set(from_json) == {"training_args", "model_kwargs", "expected"}
    assert yaml.safe_load(to_yaml(config)) == from_json
    assert from_json["training_args"] == config["training_args"]


def test_every_format_states_the_expectation(study: optuna.Study) -> None:
    # In the file, or (flags, which hold nothing but flags) in the notes the CLI prints on stderr.
    config = _config(study, 0)
    for fmt in FORMATS:
        if fmt == "deepspeed":  # a ZeRO trial's alone: tests/integration/test_export.py
            continue
        text = to_json(config) if fmt == "json" else render(config, fmt) + "\n".join(notes(config, fmt))
        if fmt == "json":
            assert json.loads(text)["expected"]["tokens_per_s"] == 30000.0
            continue
        window = "30,000 tokens/s (the search window's, not re-measured, 95% interval 29,640-30,360)"
        assert window in text and "peak memory 700 MiB" in text, fmt
        assert "no baseline measured" in text, fmt
        assert "changes the training math" in text and "precision: fp32 -> bf16" in text, fmt
    assert notes(config, "yaml") == []  # the other formats carry it themselves


def test_flags_are_flags_alone(study: optuna.Study) -> None:
    config = _config(study, 0)
    assert to_flags(config) == (
        "--per_device_train_batch_size 8 --gradient_accumulation_steps 2 --optim adamw_torch --bf16 "
        "--tf32 False --torch_compile --torch_compile_backend inductor --activation_checkpointing\n"
    )
    lines = notes(config, "flags")
    assert lines[0].startswith("autotune export: study tiny-gpt2-cpu-seq128, trial 0")
    assert "attn_implementation='sdpa' to from_pretrained" in lines[-1]


def test_training_args_is_the_flat_json_hf_argument_parser_takes(study: optuna.Study, tmp_path: Path) -> None:
    from transformers import HfArgumentParser, TrainingArguments

    config = _config(study, 0)
    path = tmp_path / "args.json"
    path.write_text(render(config, "training-args"))
    flat = json.loads(path.read_text())
    assert {k: v for k, v in flat.items() if k != "use_cpu"} == config["training_args"]
    (args,) = HfArgumentParser(TrainingArguments).parse_json_file(str(path))
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 2)
    assert args.bf16 and args.torch_compile and args.torch_compile_backend == "inductor"
    lines = notes(config, "training-args")  # what the file cannot hold goes to stderr
    assert lines[0].startswith("autotune export: study tiny-gpt2-cpu-seq128, trial 0")
    assert "attn_implementation='sdpa' to from_pretrained" in lines[-1]


def test_trl_sft_is_the_yaml_trl_sft_parses_as_it_is(study: optuna.Study, tmp_path: Path) -> None:
    # `trl sft --config FILE` parses with TrlParser over these dataclasses (trl/scripts/sft.py)
    from trl import DatasetMixtureConfig, ModelConfig, ScriptArguments, SFTConfig, TrlParser

    config = _config(study, 0)
    path = tmp_path / "sft.yaml"
    path.write_text(render(config, "trl-sft"))
    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig, DatasetMixtureConfig))
    script, args, model, _ = parser.parse_args_and_config(
        ["--config", str(path), "--dataset_name", "mine", "--output_dir", str(tmp_path / "out")]
    )
    assert isinstance(args, SFTConfig) and script.dataset_name == "mine"
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 2)
    assert args.bf16 and args.torch_compile and args.activation_checkpointing
    assert model.attn_implementation == "sdpa" and model.model_name_or_path == config["expected"]["model"]
    # TRL's own defaults (learning rate 2e-5, logging every 10 steps) do not replace what the trials ran
    assert (args.learning_rate, args.logging_steps) == (5e-5, 500)
    assert "30,000 tokens/s" in path.read_text()  # the expectation as a comment on top


def test_trl_sft_refuses_a_model_load_kwarg_trl_sft_has_no_field_for(study: optuna.Study) -> None:
    config = _config(study, 0)
    config["model_kwargs"]["quantization_config"] = {"load_in_4bit": True}
    with pytest.raises(UsageError, match=r"^--format trl-sft: trl sft has no field .*'quantization_config'"):
        render(config, "trl-sft")


def test_flags_carry_a_base_config_dict_as_one_word(tmp_path: Path) -> None:
    base = {"lr_scheduler_kwargs": {"num_cycles": 2, "power": 1.5}}
    study = make_study(None, standard_specs(), winner=0, base_args=base)
    words = to_flags(_config(study, 0)).split()
    assert words[words.index("--lr_scheduler_kwargs") + 1] == '{"num_cycles":2,"power":1.5}'


@pytest.mark.parametrize("value", ["my run", "", "run*"])
def test_flags_refuse_a_value_the_shell_would_change(tmp_path: Path, value: str) -> None:
    study = make_study(None, standard_specs(), winner=0, base_args={"run_name": value})
    with pytest.raises(UsageError, match=r"--run_name=.* cannot be a flag read by") as info:
        to_flags(_config(study, 0))
    assert info.value.hint is not None and "--format json" in info.value.hint


def test_accelerate(study: optuna.Study) -> None:
    data = yaml.safe_load(to_accelerate(_config(study, 0)))
    assert data["compute_environment"] == "LOCAL_MACHINE"
    assert data["distributed_type"] == "NO"
    assert data["mixed_precision"] == "bf16"
    assert data["num_processes"] == 1
    assert data["use_cpu"] is True  # the study ran on a CPU
    assert data["dynamo_config"] == {"dynamo_backend": "INDUCTOR"}
    plain = yaml.safe_load(to_accelerate(_config(study, 6)))
    assert plain["mixed_precision"] == "no" and "dynamo_config" not in plain


def test_accelerate_compile_mode(tmp_path: Path) -> None:
    spec = trial_spec(8, 1, "fp16", "sgd", "inductor", "sdpa", False, 1000.0, 100)
    spec["params"]["torch_compile_mode"] = "max-autotune"
    spec["attrs"]["training_args"]["torch_compile_mode"] = "max-autotune"
    data = yaml.safe_load(to_accelerate(_config(make_study(None, [spec]), 0)))
    assert data["mixed_precision"] == "fp16"
    assert data["dynamo_config"] == {"dynamo_backend": "INDUCTOR", "dynamo_mode": "max-autotune"}


def test_python_compiles_and_uses_the_task_class(study: optuna.Study, tmp_path: Path) -> None:
    text = to_python(_config(study, 0))
    compile(text, "export.py", "exec")
    assert 'AutoModelForCausalLM.from_pretrained(MODEL, attn_implementation="sdpa")' in text
    assert "bf16=True," in text and 'optim="adamw_torch",' in text
    cls_study = make_study(None, standard_specs(), task="sequence-classification", name="cls")
    cls_text = to_python(_config(cls_study, 0))
    compile(cls_text, "export.py", "exec")
    assert "AutoModelForSequenceClassification.from_pretrained(" in cls_text


def test_unknown_format_is_a_usage_error(study: optuna.Study) -> None:
    with pytest.raises(UsageError):
        render(_config(study, 0), "xml")


# -- the command -------------------------------------------------------------------------------


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`autotune.cli.main` with the export command registered on a fresh app."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command("export")(export_command)

    @app.callback()
    def _root() -> None:
        """autotune"""

    monkeypatch.setattr(cli, "app", app)

    def run(*args: str) -> int:
        with pytest.raises(SystemExit) as info:
            cli.main(["export", *args])
        return int(info.value.code or 0)

    return run


def test_cli_prints_each_format(stored: tuple[optuna.Study, str], run_cli: Any, capsys: Any) -> None:
    study, url = stored
    for fmt in FORMATS:
        if fmt == "deepspeed":  # trial 0 trained without ZeRO: one line, a usage error
            assert run_cli("--study", STUDY, "--storage", url, "--format", fmt) == 2
            captured = capsys.readouterr()
            assert captured.out == "" and captured.err.count("\n") == 1
            assert captured.err.startswith("error: trial 0 trained without DeepSpeed"), captured.err
            continue
        assert run_cli("--study", STUDY, "--storage", url, "--format", fmt) == 0
        captured = capsys.readouterr()
        answered = export_config(
            StudyStore(study), study_answer(StudyStore(study))
        )  # the answer: trial 0, re-measured
        assert answered["expected"]["trial"] == 0
        assert captured.out == render(answered, fmt)
        notes_text = "".join(f"{line}\n" for line in notes(answered, fmt))
        assert captured.err == notes_text, fmt


def test_cli_writes_flags_alone_and_the_expectation_on_stderr(
    stored: tuple[optuna.Study, str], tmp_path: Path, run_cli: Any, capsys: Any
) -> None:
    target = tmp_path / "flags.txt"
    assert run_cli("--study", STUDY, "--storage", stored[1], "-f", "flags", "-o", str(target)) == 0
    assert not any(word.startswith("#") for word in target.read_text().split())
    captured = capsys.readouterr()
    assert str(target) in captured.out
    # the answer's figures: the winner's re-measured mean, not its search window
    assert "31,000 tokens/s (re-measured mean" in captured.err and "from_pretrained" in captured.err


def test_cli_writes_output_file_with_cap(
    stored: tuple[optuna.Study, str], tmp_path: Path, run_cli: Any, capsys: Any
) -> None:
    url = stored[1]
    target = tmp_path / "best.json"
    assert (
        run_cli("--study", STUDY, "--storage", url, "-f", "json", "-o", str(target), "--memory-cap", "650MiB")
        == 0
    )
    out = capsys.readouterr().out
    assert str(target) in out and len(out.strip().splitlines()) == 1
    assert json.loads(target.read_text())["expected"]["trial"] == 6


def test_cli_errors(stored: tuple[optuna.Study, str], run_cli: Any, capsys: Any) -> None:
    url = stored[1]
    assert run_cli("--study", "missing-study", "--storage", url) == 2
    err = capsys.readouterr().err
    assert "missing-study" in err and STUDY in err
    assert run_cli("--study", STUDY, "--storage", url, "--format", "xml") == 2
    assert "xml" in capsys.readouterr().err
    assert run_cli("--study", STUDY, "--storage", url, "--memory-cap", "1MiB") == 2
    assert "--memory-cap 1MiB" in capsys.readouterr().err


def test_cli_trl_sft_that_cannot_be_written_is_one_line_and_no_file(
    stored: tuple[optuna.Study, str],
    tmp_path: Path,
    run_cli: Any,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import autotune.export.trl_sft as trl_sft

    monkeypatch.setattr(trl_sft, "_MODEL_FIELDS", ())  # attn_implementation: as a field trl sft lacks
    target = tmp_path / "sft.yaml"
    assert run_cli("--study", STUDY, "--storage", stored[1], "-f", "trl-sft", "-o", str(target)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--format trl-sft" in err and "attn_implementation" in err
    assert not target.exists()


def test_python_builds_an_sft_config_for_a_study_of_an_sft_trainer(study: optuna.Study) -> None:
    config = _config(study, 0)
    config["training_args"]["max_length"] = 512  # an SFTConfig field: tune() on an SFTTrainer
    text = to_python(config)
    assert "from trl import SFTConfig" in text and "training_args = SFTConfig(" in text
    assert "training_args = TrainingArguments(" in to_python(_config(study, 0))
    compile(text, "snippet.py", "exec")
