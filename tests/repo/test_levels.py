"""The package's levels (docs/architecture.md): no module imports one above its own level (relative or absolute,
at module level, inside functions or for type checking), and within a level the imports form no cycle."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "ropebridge"


def read_levels(doc: Path = ROOT / "docs" / "architecture.md") -> list[set[str]]:
    """The levels of the table under "## Levels", lowest first: the backticked names of each row's modules."""
    section = doc.read_text().split("## Levels", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if re.match(r"\|\s*\d+\s*\|", line)]
    return [set(re.findall(r"`([\w.]+)`", row[2])) for row in rows]


LEVELS = read_levels()


def _level(module: str, levels: list[set[str]]) -> int:
    top = module.split(".")[0]
    found = [i for i, names in enumerate(levels) if top in names]
    assert found, f"{top} is on no level of docs/architecture.md"
    return found[0]


def imports(path: Path, package: Path = PACKAGE) -> set[str]:
    """The package's modules ``path`` imports, as dotted names below the package (``a.b`` for ``ropebridge.a.b``;
    a name imported from a package counts as its submodule when one exists)."""
    tree = ast.parse(path.read_text())
    here = path.relative_to(package).with_suffix("").parts
    if here[-1] == "__init__":
        here = here[:-1] + ("__init__",)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".", 1)[1] for a in node.names if a.name.startswith(package.name + "."))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if not (node.module or "").startswith(package.name):
                    continue
                base = (node.module or "").split(".")[1:]
            else:
                base = list(here[: len(here) - node.level]) + ((node.module or "").split(".") if node.module else [])
            for alias in node.names:
                sub = base + [alias.name]
                is_module = (package.joinpath(*sub).with_suffix(".py").exists() or package.joinpath(*sub).is_dir())
                target = ".".join(sub if is_module else base)
                if target:
                    out.add(target)
    return out


def _module(path: Path, package: Path) -> str:
    parts = path.relative_to(package).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def violations(package: Path = PACKAGE, levels: list[set[str]] = LEVELS) -> list[str]:
    """Every import that runs up a level, and every cycle of imports within a level."""
    graph = {}
    for path in sorted(package.rglob("*.py")):
        graph[_module(path, package)] = {t for t in imports(path, package) if t != _module(path, package)}
    wrong = [f"{m} imports {t}" for m, targets in graph.items() for t in sorted(targets)
             if _level(t, levels) > _level(m, levels)]
    # a cycle: a module that reaches itself through imports within its own level
    for start in graph:
        seen, stack = set(), [(start, (start,))]
        while stack:
            node, trail = stack.pop()
            for t in graph.get(node, ()):
                if _level(t, levels) != _level(start, levels):
                    continue
                if t == start:
                    wrong.append("cycle: " + " -> ".join((*trail, t)))
                    stack = []
                    break
                if t not in seen:
                    seen.add(t)
                    stack.append((t, (*trail, t)))
    return sorted(set(wrong) | set(package_cycles(graph)))


def package_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every cycle between top-level packages (``convert`` importing ``reports`` while ``reports`` imports
    ``convert``), from the module graph: an arrow between two packages of one level may run one way only."""
    top = lambda m: m.split(".")[0]  # noqa: E731
    edges = {}
    for m, targets in graph.items():
        edges.setdefault(top(m), set()).update(top(t) for t in targets if top(t) != top(m))
    out = []
    for start in edges:
        seen, stack = set(), [(start, (start,))]
        while stack:
            node, trail = stack.pop()
            for t in edges.get(node, ()):
                if t == start:
                    out.append("package cycle: " + " -> ".join((*trail, t)))
                elif t not in seen:
                    seen.add(t)
                    stack.append((t, (*trail, t)))
    return out


def test_packages_form_no_cycle_and_the_check_sees_one(tmp_path):
    pkg = tmp_path / "ropebridge"
    (pkg / "conv").mkdir(parents=True)
    files = {"__init__.py": "", "conv/__init__.py": "", "conv/verify.py": "def f():\n    from ..rep import w\n",
             "conv/verdict.py": "x = 1\n", "rep.py": "from .conv.verdict import x\n"}
    for name, text in files.items():
        (pkg / name).write_text(text)
    found = violations(pkg, [{"__init__", "conv", "rep"}])
    assert any(v.startswith("package cycle: ") for v in found) and not any(v.startswith("cycle:") for v in found)
    (pkg / "conv/verify.py").write_text("")
    assert violations(pkg, [{"__init__", "conv", "rep"}]) == []


def test_no_module_imports_a_level_above_its_own_and_no_level_has_a_cycle():
    assert violations() == []


def test_every_module_is_on_a_level():
    for path in PACKAGE.rglob("*.py"):
        _level(_module(path, PACKAGE), LEVELS)


def test_the_check_can_fail(tmp_path):
    # a package with an upward import under TYPE_CHECKING, an absolute one in a function, and a cycle in a level
    pkg = tmp_path / "ropebridge"
    (pkg / "low").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..high import H\n",
        "low/b.py": "def f():\n    import ropebridge.high\n",
        "low/c.py": "from . import d\n",
        "low/d.py": "from .c import x\n",
        "high.py": "from .low import a\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    found = violations(pkg, [{"__init__", "low"}, {"high"}])
    assert "low.a imports high" in found and "low.b imports high" in found
    assert any(v.startswith("cycle: low.c -> low.d -> low.c") for v in found), found
    assert violations(pkg, [{"__init__", "low", "high"}]) != []  # the cycle stays
    (pkg / "low/d.py").write_text("x = 1\n")
    for name in ("low/a.py", "low/b.py"):
        (pkg / name).write_text("")
    assert violations(pkg, [{"__init__", "low"}, {"high"}]) == []


def test_the_levels_come_from_the_architecture_page():
    assert LEVELS[0] >= {"numerics", "_checks", "alibi", "rope"} and {"cli", "__main__"} <= LEVELS[-1]
