"""The package's shape: no import circle anywhere, and trial reasons spelled in one module.

A circle found here is one a reader of the code meets too, so every import counts: at module top,
inside functions and under ``TYPE_CHECKING`` alike (as ``../shared/tools/import_circles.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from autotune.study import outcomes

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"
# Literals that equal a reason's spelling but are something else.
NOT_REASONS = {
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


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package's ``__init__`` importing its own
    children is left out: re-exporting is not a circle of design)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    graph = {name: _imports(path, name, modules) for name, path in files.items()}
    for name, targets in graph.items():
        if files[name].name == "__init__.py":
            graph[name] = {t for t in targets if not t.startswith(f"{name}.")}
    return graph


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


def test_trial_processes_do_not_import_the_search() -> None:
    """Data flows one way: driver -> executors -> trial -> study."""
    graph = import_graph()
    lower = [m for m in graph if m.startswith(("autotune.trial", "autotune.study", "autotune.plan"))]
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
        if relative == "study/outcomes.py":
            continue
        for line, value in _reason_literals(path, reasons):
            if (relative, value) not in NOT_REASONS:
                found.append(f"{relative}:{line}: {value!r}")
    assert found == [], "spell reasons as autotune.study.outcomes constants"


def test_the_reason_finder_sees_a_stray_literal(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""oom"""\nX = {"oom": 1}\ndef f(t):\n    return t.reason == "oom"\n')
    assert _reason_literals(module, {"oom"}) == [(4, "oom")]
