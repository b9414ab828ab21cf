"""README.md is a front page and the manual in docs/ holds together: the front page is short, keeps
the two commands CI runs, states no figures of its own, and every link of it and of the manual
reaches a file (and a heading) that exists; every page is in the site's navigation.

`mkdocs build --strict` (``make docs``, in CI) checks the site itself; these checks need no mkdocs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def _prose(path: Path) -> str:
    """A page without its code blocks (their brackets are not links)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def _slug(heading: str) -> str:
    """A heading's anchor as Python-Markdown's toc makes it (mkdocs' default)."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(path: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", _prose(path), re.MULTILINE)}


def _links(path: Path) -> list[tuple[Path, str]]:
    """(target file, anchor) of each relative link of a page."""
    found = []
    for target in LINK.findall(_prose(path)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        found.append(((path.parent / file).resolve() if file else path, anchor))
    return found


def test_the_readme_is_a_front_page_of_at_most_200_lines() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    for heading in ("## Install", "## The two commands", "## A search and its answer", "## The manual"):
        assert heading in text


def test_the_readme_keeps_the_two_commands_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    block = text.split("## The two commands", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert commands == ["make run", "make test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "make test" in ci and "make docs" in ci
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^test: install\n\t\$\(BIN\)/python -m pytest -q$", makefile, re.MULTILINE)
    assert re.search(r"^run: install\n\t\$\(BIN\)/autotune search \$\(RUN_ARGS\)$", makefile, re.MULTILINE)


def test_the_readme_states_no_test_counts_dates_or_machines() -> None:
    prose = _prose(README)  # example outputs are re-taken by a script; the prose holds no figures
    for pattern in (r"\b\d+ tests\b", r"\b20\d\d-\d\d-\d\d\b", r"EPYC|Xeon|H100|H200|A100", r"\bminutes\b"):
        assert not re.search(pattern, prose), pattern
    assert "benchmarks/RESULTS.md" in prose


def test_the_readme_example_fits_in_25_lines() -> None:
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- example: search-short -->\n", 1)[1].split("<!-- /example -->", 1)[0]
    assert len(block.strip().splitlines()) - 2 <= 25  # less its fences


@pytest.mark.parametrize("page", [README, *sorted(DOCS.rglob("*.md"))], ids=lambda p: p.name)
def test_every_link_reaches_a_file_and_a_heading(page: Path) -> None:
    for target, anchor in _links(page):
        assert target.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor and target.suffix == ".md":
            assert anchor in _anchors(target), f"{page.name} links to #{anchor} of {target.name}"


def _nav_pages(nav: list) -> set[str]:
    pages: set[str] = set()
    for item in nav:
        values = item.values() if isinstance(item, dict) else [item]
        for value in values:
            pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def _nav() -> list:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["theme"]["name"] == "material" and config["strict"] is True
    return config["nav"]


def _section(title: str) -> set[str]:
    """The pages of a top-level section of the navigation (a page of its own, or a list)."""
    value = next(item[title] for item in _nav() if isinstance(item, dict) and title in item)
    return _nav_pages(value) if isinstance(value, list) else {value}


SECTIONS = ["Home", "Tutorial", "How-to guides", "Reference", "Explanation", "Benchmarks", "Contributing"]


def test_every_page_of_the_manual_is_in_the_site_navigation() -> None:
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert _nav_pages(_nav()) == pages
    assert _section("Tutorial") == {"tutorial.md"}
    for page in ("install", "python", "own-model", "own-trainer", "lora", "memory-cap", "studies"):
        assert f"how-to/{page}.md" in _section("How-to guides")
    for page in ("pools", "ddp", "ray", "docker"):
        assert f"how-to/{page}.md" in _section("How-to guides")
    for page in ("cli", "options", "knobs", "api"):
        assert f"reference/{page}.md" in _section("Reference")
    for page in ("measurement", "answer", "knobs", "processes"):
        assert f"explanation/{page}.md" in _section("Explanation")
    assert _section("Benchmarks") == {"benchmarks.md", "results.md"}


def test_the_manual_keeps_its_four_kinds_apart_and_the_contributors_pages_last() -> None:
    """Tutorial, how-to guides, reference and explanation each in a section of their own, each
    page in the folder of its kind; the contributors' pages in the last section and only there."""
    assert [next(iter(item)) for item in _nav()] == SECTIONS
    folders = {"How-to guides": "how-to/", "Reference": "reference/", "Explanation": "explanation/"}
    for title, folder in folders.items():
        assert all(page.startswith(folder) for page in _section(title)), title
    contributors = _section("Contributing")
    assert contributors == {"DESIGN.md"} | {
        p.relative_to(DOCS).as_posix() for p in (DOCS / "contributing").glob("*.md")
    }
    users = _nav_pages(_nav()) - contributors
    assert not any(page.startswith("contributing/") or page == "DESIGN.md" for page in users)


def test_the_python_api_reference_names_the_public_namespace_only() -> None:
    """Each object of the API page is named as `autotune.NAME` and exported by the package, so a
    module moved behind it does not break the page."""
    import autotune

    text = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    names = re.findall(r"^::: (\S+)$", text, re.MULTILINE)
    for name in ("search", "tune", "SearchResult", "TuneResult", "Answer", "Choice", "Reporter"):
        assert f"autotune.{name}" in names
    for name in ("RichReporter", "RunConfig", "MeasureSettings", "AutotuneError", "UsageError"):
        assert f"autotune.{name}" in names
    for name in names:
        module, _, public = name.rpartition(".")
        assert module == "autotune" and public in autotune.__all__, name


# In the users' pages' prose: a test file, a commit, a machine. Example outputs (fenced, re-taken by
# tools/docs_examples.py) show the machine that re-took them, and the benchmarks' results name theirs.
NOT_FOR_USERS = {
    "a test file": r"\btests/",
    "a commit": r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",
    "a core count": r"\b\d+ (CPU )?cores?\b",
    "a machine of ours": r"\b(seen|measured) here\b|\bhere with \w+ \d|\bmachine that ran\b",
    "a CPU model": r"EPYC|Xeon|Ryzen|Threadripper|\bCore i\d",
}


@pytest.mark.parametrize(
    "page", [README, *sorted(DOCS.rglob("*.md"))], ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_the_users_pages_cite_no_test_files_commits_or_machines(page: Path) -> None:
    if page != README and page.relative_to(DOCS).as_posix() in _section("Contributing") | {"results.md"}:
        pytest.skip("a contributors' page, or the benchmarks' results (their machines named)")
    prose = re.sub(r"<!--.*?-->", "", _prose(page), flags=re.DOTALL)
    for what, pattern in NOT_FOR_USERS.items():
        found = re.search(pattern, prose)
        assert found is None, f"{page.name} cites {what}: {found.group(0) if found else ''!r}"


def test_the_results_page_includes_the_benchmarks_results_rather_than_copying_them() -> None:
    """docs/results.md is benchmarks/RESULTS.md at build time: an inclusion, not a copy or a link
    that the site would turn into a second file."""
    page = DOCS / "results.md"
    assert not page.is_symlink()
    text = page.read_text(encoding="utf-8")
    assert re.findall(r'^--8<-- "([^"]+)"$', text, re.MULTILINE) == ["benchmarks/RESULTS.md"]
    assert (ROOT / "benchmarks" / "RESULTS.md").is_file()
    assert len(text.splitlines()) < 10  # the directive and a comment: no figure of its own
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    snippets = next(
        ext["pymdownx.snippets"]
        for ext in config["markdown_extensions"]
        if isinstance(ext, dict) and "pymdownx.snippets" in ext
    )
    assert snippets["base_path"] == ["."] and snippets["check_paths"] is True


def test_the_slugs_are_python_markdowns() -> None:
    slug = _slug("How the ranks share the model (`data_parallel`)")
    assert slug == "how-the-ranks-share-the-model-data_parallel"
    assert _slug("Finalists: re-measured in rounds") == "finalists-re-measured-in-rounds"
