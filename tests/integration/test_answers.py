"""What an answer hands back agrees with its verdict, everywhere it is rendered.

Step times are set by a test hook (`FixedStepTime`), so the comparisons are exact: a tie with the
defaults hands back the defaults; a configuration that changes the training math is handed back
only when it measurably beats the best one that keeps the math by more than `MATH_GAIN`.
"""

from __future__ import annotations

import io
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import autotune
from autotune.answer.decide import MATH_GAIN
from autotune.answer.model import BEATS_DEFAULTS, KEEP_DEFAULTS, KEEPS_MATH, Answer
from autotune.cli import main
from autotune.records import read_study
from autotune.space.mapping import trial_kwargs
from tests.helpers import FAST, FixedStepTime, write_space

# what the rounds decide, with the rounds a decision needs (`roomy_finalists`)
pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("roomy_finalists")]

FORMATS = ("json", "yaml", "flags", "accelerate", "python")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code in (0, None), captured.err
    return captured.out, captured.err


def _exports(study: str, url: str, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[str, str]]:
    return {
        fmt: _run(["export", "--study", study, "--storage", url, "--format", fmt], capsys) for fmt in FORMATS
    }


def _search(
    tmp_path: Path, space: dict[str, list[Any]], trials: int, hook: FixedStepTime, out: io.StringIO
) -> Any:
    return autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, space),
        trials=trials,
        storage=f"sqlite:///{tmp_path / 'answers.db'}",
        seq_len=16,
        measure=FAST,
        finalists=2,
        finalist_rounds=3,
        isolation="none",  # the step-time hook works the same in workers; this is faster
        callbacks=[hook],
        reporter=autotune.RichReporter(Console(file=out, width=400, color_system=None)),
    )


def test_a_tie_with_the_defaults_hands_back_the_defaults_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every configuration (the baseline's included) takes the same time per step.
    out = io.StringIO()
    space = {"attn_implementation": ["eager", "sdpa"], "optim": ["adamw_torch", "adamw_torch_fused"]}
    result = _search(tmp_path, space, 4, FixedStepTime(0.15), out)
    answer = result.answer
    assert answer.rule == KEEP_DEFAULTS and answer.keeps_defaults, out.getvalue()[-6000:]
    baseline = read_study(result.study).baseline
    defaults_args, defaults_kwargs = trial_kwargs(baseline.params)
    # What is handed back is the defaults; the best measured is named beside it, never pasted.
    assert result.best_config() == {"training_args": defaults_args, "model_kwargs": defaults_kwargs}
    assert answer.alternative is not None and answer.alternative.trial == result.best.number
    assert result.speedup_over_baseline == 1.0
    printed = " ".join(out.getvalue().split())
    assert "answer: nothing beat the defaults measurably" in printed
    assert "use: the defaults" in printed
    assert f"alternative, not handed back: trial {result.best.number}" in printed
    printed_config = json.loads(out.getvalue()[out.getvalue().rindex('{\n  "training_args"') :])
    assert printed_config["training_args"]["optim"] == defaults_args["optim"]
    assert printed_config["training_args"]["per_device_train_batch_size"] == 8
    assert printed_config["model_kwargs"] == defaults_kwargs
    # Every export format writes the defaults, and names the best measured as the alternative.
    url = f"sqlite:///{tmp_path / 'answers.db'}"
    exported = _exports(result.study.study_name, url, capsys)
    config = json.loads(exported["json"][0])
    assert config["training_args"]["optim"] == defaults_args["optim"]
    assert config["training_args"]["per_device_train_batch_size"] == 8
    assert config["model_kwargs"] == defaults_kwargs
    assert (
        config["expected"]["trial"] is None
        and config["expected"]["alternative"]["trial"] == result.best.number
    )
    assert f"--optim {defaults_args['optim']}" in exported["flags"][0]
    assert f"optim={json.dumps(defaults_args['optim'])}" in exported["python"][0]
    for fmt in ("yaml", "accelerate", "python"):
        text = exported[fmt][0]
        assert "# use: the defaults" in text, fmt
        assert f"alternative, not handed back: trial {result.best.number}" in text, fmt
        # the finalists' time and the A/A figure travel with the answer into every format
        assert "finalists: " in text and "measurements (set-up" in text, fmt
        assert "instrument (A/A): the baseline measured twice in each of" in text, fmt
    spent = answer.finalists_time
    assert spent is not None and spent["measurements"] >= 3 * 3 and 0 < spent["share"] < 1
    assert config["expected"]["finalists_time"] == spent
    assert answer.aa is not None and answer.aa.rounds >= 3
    assert config["expected"]["aa"] == answer.aa.to_dict()
    assert "finalists: " in printed and "instrument (A/A)" in printed
    assert "use: the defaults" in exported["flags"][1]  # beside the flags, on stderr
    # `autotune show` gives the same answer from the store.
    shown, _ = _run(["show", "--study", result.study.study_name, "--storage", url], capsys)
    shown = " ".join(shown.split())
    assert answer.verdict in shown and "use: the defaults" in shown
    assert f"alternative, not handed back: trial {result.best.number}" in shown
    assert '"training_args"' not in shown  # the config is `autotune export`'s


@pytest.mark.parametrize(("gain", "math_change_wins"), [(1.03, False), (1.30, True)])
def test_a_math_change_is_the_answer_only_when_it_beats_the_best_math_keeping_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gain: float, math_change_wins: bool
) -> None:
    # The baseline (adamw_torch_fused) at 0.3 s a step; adamw_torch keeps the math and is 1.25x
    # faster; adafactor changes the optimizer's update rule and is `gain` times faster still. Each
    # step's own work (a few ms) stays well under these, on a loaded machine too.
    keeping_s = 0.24
    hook = FixedStepTime(
        0.3, by_params=[({"optim": "adafactor"}, keeping_s / gain), ({"optim": "adamw_torch"}, keeping_s)]
    )
    out = io.StringIO()
    result = _search(tmp_path, {"optim": ["adamw_torch_fused", "adamw_torch", "adafactor"]}, 3, hook, out)
    numbers = {t.params["optim"]: t.number for t in result.trials if t.tokens_per_s and not t.reused}
    answer = result.answer
    assert answer.choice is not None and answer.alternative is not None
    if math_change_wins:
        assert answer.rule == BEATS_DEFAULTS, (answer, out.getvalue()[-3000:])
        assert answer.choice.trial == numbers["adafactor"]
        assert answer.alternative.trial == numbers["adamw_torch"]  # the math-keeping one, named
        assert any(change.startswith("optimizer") for change in answer.choice.changes)
        assert f"more than the {1 + MATH_GAIN:.2f}x" in answer.verdict
    else:
        assert answer.rule == KEEPS_MATH
        assert answer.choice.trial == numbers["adamw_torch"] and not answer.choice.changes
        assert answer.alternative.trial == numbers["adafactor"]
        assert any(change.startswith("optimizer") for change in answer.alternative.changes)
        assert answer.alternative_gain is not None and answer.alternative_gain.value > 1
    assert answer.choice.speedup is not None and answer.choice.speedup.low > 1.01  # beats the defaults
    # The expected figures are the finalists' re-measured means, in every export format.
    finalist = next(f for f in read_study(result.study).finalists if f.number == answer.choice.trial)
    median = statistics.geometric_mean(finalist.tokens_per_s)
    assert answer.choice.remeasured and answer.choice.tokens_per_s.value == pytest.approx(median)
    url = f"sqlite:///{tmp_path / 'answers.db'}"
    exported = _exports(result.study.study_name, url, capsys)
    expected = json.loads(exported["json"][0])["expected"]
    assert expected["remeasured"] is True
    assert expected["tokens_per_s"] == pytest.approx(median)
    assert expected["trial"] == answer.choice.trial
    figure = f"expected: {median:,.0f} tokens/s (re-measured mean"
    for fmt in ("yaml", "accelerate", "python"):
        assert figure in exported[fmt][0], fmt
    assert figure in exported["flags"][1]
    optim = "adafactor" if math_change_wins else "adamw_torch"
    assert f"--optim {optim}" in exported["flags"][0]


def test_tune_hands_back_the_trainers_own_arguments_on_a_tie(tmp_path: Path) -> None:
    # A user's Trainer whose every configuration runs as fast as its own arguments.
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from tests.local_models import user_corpus

    _tokenizer, config, train = user_corpus(tmp_path / "mine", 40, padding=True)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), learning_rate=3e-4, seed=7)
    trainer = Trainer(
        model_init=lambda: AutoModelForCausalLM.from_config(config),
        args=args,
        train_dataset=train.map(lambda row: {"labels": row["input_ids"]}),
    )
    space = {"optim": ["adamw_torch", "adamw_torch_fused"], "attn_implementation": ["eager", "sdpa"]}
    tuned = autotune.tune(
        trainer,
        space=write_space(tmp_path, space),
        n_trials=4,
        storage=f"sqlite:///{tmp_path / 'tune.db'}",
        measure=FAST,
        finalists=2,
        isolation="none",
        callbacks=[FixedStepTime(0.15)],
    )
    answer = tuned.answer
    assert answer.rule == KEEP_DEFAULTS and answer.keeps_defaults
    # The Trainer's own batch, optimizer and attention come back; nothing changes the math.
    assert tuned.training_args.per_device_train_batch_size == args.per_device_train_batch_size
    assert tuned.training_args.gradient_accumulation_steps == args.gradient_accumulation_steps
    assert tuned.training_args.optim == args.optim
    assert tuned.training_args.learning_rate == 3e-4 and tuned.training_args.seed == 7
    assert tuned.model_kwargs == answer.choice.model_kwargs  # type: ignore[union-attr]
    assert tuned.semantic_changes == []
    # The best measured is named beside it, as in the search's result and the store.
    assert answer.alternative is not None and answer.alternative.trial == tuned.search.best.number
    assert Answer.from_dict(read_study(tuned.search.study).answer or {}) == answer


def test_a_trial_of_the_defaults_configuration_is_the_baseline_not_a_contestant(tmp_path: Path) -> None:
    # The space holds the baseline's own configuration (adamw_torch_fused), made the fastest.
    hook = FixedStepTime(0.3, by_params=[({"optim": "adamw_torch_fused"}, 0.24)])
    out = io.StringIO()
    result = _search(tmp_path, {"optim": ["adamw_torch_fused", "adamw_torch", "adafactor"]}, 3, hook, out)
    itself = [t.number for t in result.trials if t.params.get("optim") == "adamw_torch_fused"]
    assert itself, "the space's baseline configuration was never sampled: the test proves nothing"
    record = read_study(result.study)
    # No trial is compared with itself: the baseline's configuration never enters the finalists.
    assert not set(itself) & {f.number for f in record.finalists}
    answer = result.answer
    assert answer.rule == KEEP_DEFAULTS and answer.keeps_defaults
    assert result.speedup_over_baseline == 1.0 and "beats the defaults" not in answer.verdict
    assert answer.alternative is None or answer.alternative.trial not in itself
    assert "ok (= baseline)" in out.getvalue()  # the table shows it as the baseline
