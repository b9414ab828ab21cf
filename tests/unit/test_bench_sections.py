"""RESULTS.md is the benchmarks' sections, each rendered from its committed JSON by the module that
measured it, in `assemble.ORDER`: rendering them again changes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import assemble, finalists_cost, gpu, lora, report
from tests.unit.bench_helpers import section
from tests.unit.test_bench_screening import WINNER, _data, _run

MEASURED = [(name, module) for name, module in assemble.ORDER if module and report.load(name) is not None]


def test_results_md_is_what_the_committed_json_renders() -> None:
    assert assemble.assemble() == assemble.OUT.read_text(), "stale: python -m benchmarks.assemble"


@pytest.mark.parametrize(("name", "module"), MEASURED, ids=[name for name, _ in MEASURED])
def test_each_section_renders_from_its_json_into_results_md(name: str, module: str) -> None:
    render = assemble._function(module, name, "render")
    assert render is not None, f"benchmarks.{module} has no renderer for results/{name}.json"
    data = report.load(name)
    assert data is not None
    assert render(data) in assemble.OUT.read_text()


def test_every_stored_result_has_its_place_in_the_order() -> None:
    names = {name for name, _ in assemble.ORDER}
    assert {path.stem for path in report.RESULTS.glob("*.json")} <= names


def test_hand_written_sections_are_kept_and_unmeasured_benchmarks_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results, sections = tmp_path / "results", tmp_path / "sections"
    results.mkdir()
    sections.mkdir()
    (results / "screening.json").write_text(
        json.dumps(_data(_run(0.0, 90, 50, WINNER), _run(0.5, 30, 10, WINNER)))
    )
    (sections / "reliability.md").write_text("## Reliability\n\nby hand\n")
    (sections / "gpu.md").write_text("## GPU\n\nnot run yet\n")
    (results / "no_module.json").write_text("{}")  # listed before its module exists
    order = (("screening", "screening"), ("reliability", None), ("no_module", "no_module"), ("gpu", "gpu"))
    monkeypatch.setattr(report, "RESULTS", results)
    monkeypatch.setattr(assemble, "SECTIONS", sections)
    monkeypatch.setattr(assemble, "ORDER", order)
    out = assemble.assemble()
    assert [name for name, _, _ in assemble.parts()] == ["screening", "reliability", "gpu"]
    assert (
        out.index("## 6. Screening") < out.index("## Reliability\n\nby hand") < out.index("## GPU\n\nnot run")
    )
    summary = out[out.index("## Where autotune wins") : out.index("## 6. Screening")]
    assert "- Screening: a 12-trial search over a space where bf16 runs far slower takes 30 s" in summary


def test_check_fails_on_a_stale_results_md(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "RESULTS.md"
    stale.write_text("# by hand\n")
    monkeypatch.setattr(assemble, "OUT", stale)
    monkeypatch.setattr(sys, "argv", ["assemble", "--check"])
    with pytest.raises(SystemExit, match=r"RESULTS\.md is stale"):
        assemble.main()
    monkeypatch.setattr(sys, "argv", ["assemble"])
    assemble.main()
    assert stale.read_text() == assemble.OUT.read_text() != "# by hand\n"


def test_summary_and_table_helpers() -> None:
    assert report.summary([3.0, None, 1.0, 2.0, 10.0]) == {"n": 4, "median": 2.5, "min": 1.0, "max": 10.0}
    assert report.summary([]) == {"n": 0, "median": None, "min": None, "max": None}
    assert report.spread(report.summary([1.0, 3.0]), report.seconds) == "2.00 s (1.00 s-3.00 s)"
    # cells as given: no number parsing (">128" beside "19.5", "1.0" kept)
    assert report.table(["a", "b"], [[">128", "1.0"], ["19.5", None]]).splitlines() == [
        "| a    | b   |",
        "|------|-----|",
        "| >128 | 1.0 |",
        "| 19.5 |     |",
    ]


def test_a_template_field_left_unfilled_is_an_error() -> None:
    with pytest.raises(KeyError, match="claims"):
        report.fill("assemble", "head")


def _lora_row(batch: int, rate: float, peak_mib: float) -> dict[str, Any]:
    return {
        "batch": batch,
        "tokens_per_s": rate,
        "peak_bytes": peak_mib * 2**20,
        "estimate_bytes": 400 * 2**20,
        "estimate_error": -0.1,
        "trainable_params": 10,
        "total_params": 100,
        "reason": None,
        "message": None,
    }


def test_lora_says_which_peak_is_higher_from_the_runs_not_stored_words() -> None:
    runs = [
        {"arm": "full fine-tune", "trials": [_lora_row(4, 100.0, 427.0), _lora_row(16, 200.0, 500.0)]},
        {"arm": "LoRA (--peft lora)", "trials": [_lora_row(4, 116.0, 428.0), _lora_row(16, 228.0, 480.0)]},
    ]
    machine = {"cpu": "Test CPU", "cores": 2, "torch": "2.13.0+cpu", "date": "2026-11-26 05:27 UTC"}
    data = {"model": "tiny-llama", "seq_len": 128, "trials": 2, "machine": machine, "runs": runs}
    text = section(lora, data | {"notes": ["- stale words stored with the run"]})
    assert "- batch 4: LoRA runs at 1.16x the full fine-tune's tokens/s, its peak 1 MiB higher." in text
    assert "- batch 16: LoRA runs at 1.14x the full fine-tune's tokens/s, its peak 20 MiB lower." in text
    assert "stale words" not in text
    assert "|:-----" in lora.render(data) and "------:|" in lora.render(data)  # numbers right-aligned


def _cost_run(search: str, code: str, finalists_s: float, share: float) -> dict[str, Any]:
    return {
        "search": search,
        "code": code,
        "date": "2026-11-26 04:08 UTC",
        "wall_s": 100.0,
        "stages": {"finalists_s": finalists_s},
        "finalists_share": share,
        "rule": "keep_defaults",
        "verdict": "keep them",
    }


def test_finalists_cost_judges_the_goal_and_the_change_from_its_runs() -> None:
    machine = {"cpu": "Test CPU", "cores": 2, "commit": "abc1234"}
    runs = [_cost_run("make_run", "before", 40.0, 0.6), _cost_run("make_run", "after", 10.0, 0.25)]
    runs += [_cost_run("custom", "before", 50.0, 0.5), _cost_run("custom", "after", 20.0, 0.28)]
    text = section(finalists_cost, {"machine": machine, "before": "a45862e", "runs": runs})
    assert "is **met**: 25% and 28% here." in text
    assert "The finalists' seconds fell to 25% (make run) and 40% (custom) of the before's" in text
    assert "--before a45862e [--only make_run|custom]" in text
    runs[1] = _cost_run("make_run", "after", 60.0, 0.45)
    text = section(finalists_cost, {"machine": machine, "before": "a45862e", "runs": runs})
    assert "is **not met**: 45% and 28% here." in text
    assert "seconds came to 150% (make run) and 40% (custom)" in text


def test_gpu_section_from_its_results() -> None:
    contender = {"median_tokens_per_s": 120_000.0, "over_defaults": 1.5, "mfu": 0.31}
    contender |= {"peak_memory_bytes": 20 * 2**30, "params": {"per_device_train_batch_size": 16}}
    run = {"cost": {"trained_trials": 12}, "search_wall_s": 300.0, "trials_to_best": 4}
    run |= {"contenders": {"autotune": contender}}
    knobs = {"model": "llama-1b", "batch": 8, "reference": "bf16", "peft": None}
    knobs |= {
        "rows": {"fp8": {"not_run": "needs an H100"}, "bf16": {"tokens_per_s": 9000.0, "state": "COMPLETE"}}
    }
    machine = {"gpu": "NVIDIA H100", "date": "2026-11-26", "torch": "2.13.0", "transformers": "5.24.0"}
    data = {
        "machine": machine | {"commit": "abc1234"},
        "trials": 12,
        "rounds": 3,
        "presets": {"gpt2-124m": run},
    }
    text = section(gpu, data | {"gpu_knobs": knobs})
    assert text.startswith("## GPU: end to end on NVIDIA H100\n")
    assert "| autotune | 120,000 | 1.50x | 31.0% | 20.0 GiB | `bs=16` |" in text
    assert "### GPU-only knobs: llama-1b, batch 8, one window each" in text
    assert "| fp8 | - | - | - | needs an H100 |" in text and "| bf16 | 9,000 | - | - | |" in text


def test_gpu_mfu_counts_the_presets_parameters_without_weights() -> None:
    """`python -m benchmarks.gpu` counts parameters on the meta device; building through
    from_pretrained there raised (transformers 5), after the first preset's whole search."""
    per_token = gpu.model_flops_per_token("tiny-llama")
    assert per_token > 6 * 300_000  # 6 x its parameters at least (attention adds to it)
