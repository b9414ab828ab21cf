"""The package's shape: no import circle anywhere, between modules or between top-level parts;
nothing but the entry point imports the CLI; trial reasons spelled in one module.

A circle found here is one a reader of the code meets too, so every import counts: at module top,
inside functions and under ``TYPE_CHECKING`` alike (as ``../shared/tools/import_circles.py``).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from autotune.store import outcomes

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autotune"
# Literals that equal a reason's spelling but are something else.
NOT_REASONS = {
    ("records/study.py", "error"): "the stored key of a failed baseline's message",
    ("cli/__init__.py", "interrupted"): "the line printed on Ctrl-C",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def all_imports() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, every import counted."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {name: _imports(path, name, modules) for name, path in files.items()}


def import_graph() -> dict[str, set[str]]:
    """`all_imports`, less a package's ``__init__`` importing its own children: re-exporting is not
    a circle of design."""
    packages = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}
    return {
        name: {t for t in targets if not (name in packages and t.startswith(f"{name}."))}
        for name, targets in all_imports().items()
    }


def top_level_part(module: str) -> str:
    """The subpackage or top-level module a module belongs to: ``autotune.plan.build`` ->
    ``autotune.plan``; ``autotune.errors`` and ``autotune`` (the package's ``__init__``) are their own."""
    return ".".join(module.split(".")[:2])


def part_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """`graph` collapsed to top-level parts: part -> the other parts its modules import."""
    parts: dict[str, set[str]] = {}
    for module, targets in graph.items():
        part = top_level_part(module)
        parts.setdefault(part, set()).update(top_level_part(t) for t in targets if top_level_part(t) != part)
    return parts


def _in_cli(module: str) -> bool:
    return module == "autotune.cli" or module.startswith("autotune.cli.")


def cli_importers(graph: dict[str, set[str]]) -> set[str]:
    """Modules outside ``autotune.cli`` that import from it, but the entry point ``__main__``."""
    return {
        module
        for module, targets in graph.items()
        if not _in_cli(module) and module != "autotune.__main__" and any(_in_cli(t) for t in targets)
    }


def find_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), and modules importing
    themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert find_circles(graph) == [["a", "b", "c"]]
    assert find_circles({"a": {"b"}, "b": set()}) == []


def test_function_level_imports_count(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from autotune.x import y\n")
    assert _imports(module, "autotune.m", {"autotune.x", "autotune.m"}) == {"autotune.x"}


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert "autotune.trial.trainer" in graph and "autotune.driver.search" in graph
    assert find_circles(graph) == []


def test_no_two_top_level_parts_import_each_other() -> None:
    """Data flows one way between the subpackages and top-level modules (DESIGN.md, Layout): two
    parts that import each other are a circle of design even when no two of their modules are."""
    parts = part_graph(import_graph())
    assert {"autotune.options", "autotune.plan", "autotune.store", "autotune.cli"} <= set(parts)
    assert find_circles(parts) == []


def test_the_part_graph_finds_a_circle_no_module_is_in() -> None:
    graph = {
        "autotune.config": {"autotune.store.urls"},
        "autotune.store.store": {"autotune.config", "autotune.store.urls"},
        "autotune.store.urls": {"autotune.errors"},
        "autotune.errors": set(),
    }
    assert find_circles(graph) == []
    parts = part_graph(graph)
    assert parts["autotune.store"] == {"autotune.config", "autotune.errors"}
    assert find_circles(parts) == [["autotune.config", "autotune.store"]]


def test_nothing_but_the_entry_point_imports_the_cli() -> None:
    """The library never reaches into ``cli/``; a package ``__init__``'s own (lazy) re-exports count."""
    graph = all_imports()
    assert "autotune.cli" in graph["autotune.__main__"]
    assert cli_importers(graph) == set()


def test_the_cli_check_sees_a_lazy_import_in_the_package_init(tmp_path: Path) -> None:
    init = tmp_path / "__init__.py"
    init.write_text("def __getattr__(name):\n    from autotune.cli._render import RichReporter\n")
    modules = {"autotune", "autotune.__main__", "autotune.cli", "autotune.cli._render", "autotune.view"}
    graph = {
        "autotune": _imports(init, "autotune", modules),
        "autotune.__main__": {"autotune.cli"},
        "autotune.cli": {"autotune.cli._render"},
        "autotune.cli._render": set(),
        "autotune.view": {"autotune.cli"},
    }
    assert graph["autotune"] == {"autotune.cli._render"}
    assert cli_importers(graph) == {"autotune", "autotune.view"}


def test_trial_processes_do_not_import_the_search() -> None:
    """Data flows one way: driver -> executors -> trial -> study."""
    graph = import_graph()
    lower = [m for m in graph if m.startswith(("autotune.trial", "autotune.store", "autotune.plan"))]
    for module in lower:
        upward = {
            t
            for t in graph[module]
            if t.startswith(("autotune.driver", "autotune.executors", "autotune.cli"))
        }
        assert not upward, f"{module} imports {sorted(upward)}"


def _reason_literals(path: Path, reasons: set[str]) -> list[tuple[int, str]]:
    """String constants spelled like a reason, outside docstrings and dict keys."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            skipped.add(id(first.value))  # a docstring
        if isinstance(node, ast.Dict):
            skipped.update(id(key) for key in node.keys if key is not None)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in reasons and id(node) not in skipped
    ]


def test_reasons_are_spelled_in_one_module() -> None:
    reasons = {value for name, value in vars(outcomes).items() if name.isupper() and isinstance(value, str)}
    assert {"oom", "killed", "crashed", "hung", "interrupted", "nan_loss", "duplicate"} <= reasons
    found = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative == "store/outcomes.py":
            continue
        for line, value in _reason_literals(path, reasons):
            if (relative, value) not in NOT_REASONS:
                found.append(f"{relative}:{line}: {value!r}")
    assert found == [], "spell reasons as autotune.store.outcomes constants"


def test_the_reason_finder_sees_a_stray_literal(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""oom"""\nX = {"oom": 1}\ndef f(t):\n    return t.reason == "oom"\n')
    assert _reason_literals(module, {"oom"}) == [(4, "oom")]


# Names whose subscripts and `.get` calls read optuna user attrs (a trial's or a study's).
_ATTR_HOLDERS = {"user_attrs", "attrs", "system_attrs"}


def _holder(node: ast.expr) -> str | None:
    """`user_attrs` of ``x.user_attrs``/``user_attrs``/``x.attrs()``: the name a key is read from."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _user_attr_literals(path: Path) -> list[tuple[int, str]]:
    """User-attr keys spelled as literals: ``attrs["k"]``, ``user_attrs.get("k")``,
    ``set_user_attr("k", ...)`` and ``set_trial_user_attr(id, "k", ...)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        key: ast.expr | None = None
        if isinstance(node, ast.Subscript) and _holder(node.value) in _ATTR_HOLDERS:
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            if (method == "get" and _holder(node.func.value) in _ATTR_HOLDERS and node.args) or (
                method == "set_user_attr" and node.args
            ):
                key = node.args[0]
            elif method == "set_trial_user_attr" and len(node.args) > 1:
                key = node.args[1]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.append((node.lineno, key.value))
    return found


def test_user_attr_keys_are_spelled_in_the_records_module() -> None:
    """A trial's and a study's stored attributes are read and written through `autotune.records`
    (typed records): no other module spells a user-attr key."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("records/"):
            continue
        found += [f"{relative}:{line}: {key!r}" for line, key in _user_attr_literals(path)]
    assert found == [], "read and write user attrs through autotune.records"


def test_the_user_attr_finder_sees_every_spelling(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f(t, s, trial, storage):\n"
        '    a = t.user_attrs["tokens_per_s"]\n'
        '    b = t.attrs.get("reason")\n'
        '    s.set_user_attr("winner", 1)\n'
        '    storage.set_trial_user_attr(1, "worker", {})\n'
        '    c = t.params["bs"]\n'
        '    return {"tokens_per_s": 1}.get("tokens_per_s")\n'
    )
    assert _user_attr_literals(module) == [
        (2, "tokens_per_s"),
        (3, "reason"),
        (4, "winner"),
        (5, "worker"),
    ]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_no_test_fixture_is_ignored_by_git() -> None:
    # An ignored fixture passes here and is missing from CI's clean clone (store_v0.db once was).
    folder = ROOT / "tests" / "fixtures"
    fixtures = sorted(str(p.relative_to(ROOT)) for p in folder.rglob("*") if p.is_file())
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *fixtures], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert fixtures and not ignored, f"git ignores test fixtures: {ignored}"


def test_first_line_is_defined_once() -> None:
    """An exception's first line is `autotune.errors.first_line`; no module defines its own."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "first_line":
                found.append(path.relative_to(PACKAGE).as_posix())
    assert found == ["errors.py"]


def _optuna_importers(package: Path) -> list[str]:
    """The modules of `package` that import optuna (at any level, lazily or not)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            if any(n == "optuna" or n.startswith("optuna.") for n in names):
                found.append(path.relative_to(package).as_posix())
                break
    return found


def test_optuna_is_imported_by_the_store_only() -> None:
    """The store package is the only holder of optuna: every other package reads and writes a
    study through its `StudyStore` sessions."""
    importers = _optuna_importers(PACKAGE)
    assert importers and all(path.startswith("store/") for path in importers), importers


def test_no_package_but_the_store_reaches_through_a_session_to_optuna() -> None:
    """`StudyStore.optuna_study` is for users' own optuna tools, never for autotune's packages."""
    reached = [
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if not path.relative_to(PACKAGE).as_posix().startswith("store/")
        and any(
            isinstance(node, ast.Attribute) and node.attr in ("optuna_study", "_study")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    ]
    assert reached == []


def test_the_optuna_finder_sees_every_form(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "a.py").write_text("def f():\n    import optuna.trial\n")
    (tmp_path / "b.py").write_text("from optuna.trial import FrozenTrial\n")
    (tmp_path / "c.py").write_text("import optunanot\nfrom . import optuna\n")
    (tmp_path / "store" / "d.py").write_text("import optuna\n")
    assert _optuna_importers(tmp_path) == ["a.py", "b.py", "store/d.py"]


def test_the_benchmarks_have_no_import_circle() -> None:
    """A benchmark writes its results through the assembler; the assembler reads them through
    ``benchmarks.report``, which imports neither."""
    files = {_module_name(p): p for p in (ROOT / "benchmarks").glob("*.py")}
    graph = {name: _imports(path, name, set(files)) for name, path in files.items()}
    assert "benchmarks.report" in graph["benchmarks.assemble"]
    assert find_circles(graph) == []


def test_the_code_narrates_no_history() -> None:
    """Docstrings and comments say what the code does and why; issues, commits and measured figures
    live in git and benchmarks/RESULTS.md."""
    import re

    history = re.compile(r"issue [0-9]|commit [0-9a-f]{6,}|[0-9.]+ s against")
    found = [
        f"{path.relative_to(PACKAGE).as_posix()}:{number}"
        for path in PACKAGE.rglob("*.py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if history.search(line)
    ]
    assert found == []
