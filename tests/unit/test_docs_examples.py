"""tools/docs_examples.py: each example block of the manual is replaced by what its commands print,
trimmed the same way every time; other blocks and the text around them are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import docs_examples as de

ROOT = Path(__file__).resolve().parents[2]

PAGE = """# A page

Some text.

<!-- example: fake -->
```text
$ old command
old output
```
<!-- /example -->

Between.

<!-- example: other -->
```text
untouched
```
<!-- /example -->
"""


def test_a_block_is_replaced_and_the_rest_of_the_page_left_as_it_is() -> None:
    new = de.replace_blocks(PAGE, {"fake": "```text\n$ echo hi\nhi\n```\n"})
    assert new == PAGE.replace("$ old command\nold output\n", "$ echo hi\nhi\n")
    assert de.replace_blocks(PAGE, {}) == PAGE
    assert de.names_in(PAGE) == ["fake", "other"]


def test_an_unclosed_block_is_an_error() -> None:
    broken = PAGE.replace("untouched\n```\n<!-- /example -->", "untouched\n```\n")
    with pytest.raises(ValueError, match="'other' is not closed"):
        de.replace_blocks(broken, {"fake": "x\n"})


def test_examples_run_in_order_in_one_folder_and_a_shared_command_runs_once(tmp_path: Path) -> None:
    count = "echo ran >> count.txt; echo 'from '$PWD'/x'; printf 'padded   \\n'"
    examples = (
        de.Example("fake", (de.Command("echo hi", "echo hi"), de.Command("shared", count))),
        de.Example("short", (de.Command("shared", count, de.keep(("from",))),)),
        de.Example("code", (de.Command("", "cat count.txt"),), lang="python"),
    )
    blocks = de.run_examples(examples, tmp_path)
    assert blocks["fake"] == "```text\n$ echo hi\nhi\n$ shared\nfrom ./x\npadded\n```\n"
    assert blocks["short"] == "```text\n$ shared\nfrom ./x\n```\n"
    assert blocks["code"] == "```python\nran\n```\n"  # the shared command ran once
    new = de.replace_blocks(PAGE, blocks)
    assert "<!-- example: fake -->\n```text\n$ echo hi\nhi\n$ shared" in new


def test_a_failing_command_stops_the_run(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="exited 3: oops"):
        de.run_examples((de.Example("bad", (de.Command("bad", "echo oops; exit 3"),)),), tmp_path)


def test_main_rewrites_the_pages_holding_the_chosen_examples(tmp_path: Path, monkeypatch, capsys) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE, encoding="utf-8")
    fake = de.Example("fake", (de.Command("echo new", "echo new"),))
    monkeypatch.setattr(de, "EXAMPLES", (fake,))
    monkeypatch.setattr(de, "BY_NAME", {"fake": fake})
    monkeypatch.setattr(de, "pages", lambda root=tmp_path: [page])
    monkeypatch.setattr(de, "ROOT", tmp_path)
    assert de.main(["--only", "fake"]) == 0
    assert page.read_text(encoding="utf-8") == PAGE.replace("$ old command\nold output", "$ echo new\nnew")


def _search_output(trials: int) -> str:
    lines = ["autotune study s in sqlite:///autotune.db", "baseline: 28.1k tok/s, peak 469 MiB"]
    lines += [f"trial {i:3d}  bs=8  {20 + i}.0k tok/s  ok" for i in range(trials)]
    lines += ["trial  99  bs=8  same parameters as trial 1: its result is reused"]
    lines += ["  re-measure round 1: trial 7  30.1k tok/s", "best measured: trial 7"]
    lines += ["answer: trial 7 beats the defaults: 1.25x", "use: trial 7", "expected: 31,505 tokens/s"]
    lines += ["loss vs the baseline at equal tokens: +0.0%", "search time: 43.3 s"]
    lines += ["changes the training math, compared with the baseline:", "  precision: fp32 -> bf16"]
    lines += ["  effective batch per device: 8 -> 32", "{", '  "training_args": {}', "}"]
    return "\n".join(lines)


@pytest.mark.parametrize("trials", [8, 30])
def test_the_short_search_fits_the_readme(trials: int) -> None:
    short = de.search_short(_search_output(trials)).splitlines()
    assert len(short) + 1 <= 25  # with its command line
    assert short[0].startswith("baseline:") and short[1].startswith("trial   0")
    assert not any("reused" in line or "re-measure" in line for line in short)
    assert short[1 + min(trials, 12) :] == [
        "...",
        "answer: trial 7 beats the defaults: 1.25x",
        "use: trial 7",
        "expected: 31,505 tokens/s",
        "changes the training math, compared with the baseline:",
        "  precision: fp32 -> bf16",
        "  effective batch per device: 8 -> 32",
    ]


def test_every_block_of_the_manual_is_an_example_the_script_takes() -> None:
    found = {name for page in de.pages(ROOT) for name in de.names_in(page.read_text(encoding="utf-8"))}
    assert found == set(de.BY_NAME)


def _block(page: Path, name: str) -> list[str]:
    """An example block's lines, less its fences."""
    text = page.read_text(encoding="utf-8")
    body = text.split(f"<!-- example: {name} -->\n", 1)[1].split("<!-- /example -->", 1)[0]
    return body.strip().splitlines()[1:-1]


def test_the_readme_search_is_the_manual_search_shortened() -> None:
    """Both blocks come from one run of `make run`'s search: neither was edited by hand."""
    full = _block(ROOT / "docs" / "tutorial.md", "search")
    short = _block(ROOT / "README.md", "search-short")
    assert full[0] == short[0] == f"$ {de.MAKE_RUN}"
    assert short[1:] == de.search_short("\n".join(full[1:])).splitlines()


def test_the_code_shown_is_the_example_file_it_runs() -> None:
    shown = _block(ROOT / "docs" / "tutorial.md", "use-export-code")
    assert shown == (ROOT / "examples" / "use_export.py").read_text(encoding="utf-8").strip().splitlines()


def test_the_search_example_is_make_runs_search() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    run_args = next(line for line in makefile.splitlines() if line.startswith("RUN_ARGS ?="))
    assert f"autotune search {run_args.split('?=', 1)[1].strip()}" == de.MAKE_RUN


def test_a_command_redirecting_its_own_stderr_keeps_it_out_of_the_block(tmp_path: Path) -> None:
    script = "{ echo out; echo err >&2; } 2>err.txt"
    blocks = de.run_examples((de.Example("redirect", (de.Command("x", script),)),), tmp_path)
    assert blocks["redirect"] == "```text\n$ x\nout\n```\n"
    assert (tmp_path / "err.txt").read_text() == "err\n"


def test_the_search_summary_keeps_the_model_lines_every_trial_and_the_answer() -> None:
    output = _search_output(30).replace(
        "baseline:", "model ./m (causal-lm)\n  dataset: 71 samples\nbaseline:", 1
    )
    summary = de.search_summary(output).splitlines()
    assert summary[:3] == [
        "model ./m (causal-lm)",
        "  dataset: 71 samples",
        "baseline: 28.1k tok/s, peak 469 MiB",
    ]
    assert len([line for line in summary if line.startswith("trial ")]) == 30
    assert summary[-1] == "  effective batch per device: 8 -> 32" and '  "training_args": {}' not in summary


def test_json_key_reads_the_json_after_any_note_lines() -> None:
    output = 'note: {not json}\n{\n  "peft": {"r": 8},\n  "other": 1\n}\n'
    assert de.json_key("peft", comment="# its peft:")(output) == '# its peft:\n{"r": 8}'


def test_json_key_shows_the_fields_asked_for_then_an_ellipsis() -> None:
    output = '{"peft": {"peft_type": "LORA", "r": 8, "revision": null}}'
    trim = de.json_key("peft", comment="# in part:", fields=("peft_type", "r", "absent"))
    assert trim(output) == '# in part:\n{"peft_type": "LORA", "r": 8, ...}'
