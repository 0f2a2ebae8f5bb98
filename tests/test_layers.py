"""The package's layers: no module imports one above its own (function-level imports included; imports only for
type checking excepted), so nothing runs up a floor and there is no cycle."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ropebridge"
# lowest first: a module may import its own layer and those below
LAYERS = [
    {"__init__", "__version__", "_checks", "_progress", "_interrupt", "alibi", "rope", "frequencies", "analysis"},
    {"checkpoint"},
    {"targets"},
    {"emulation"},
    {"planning", "serving", "plots", "demo_report"},
    {"convert"},
    {"demo"},
    {"cli", "__main__"},
]


def _layer(module: str) -> int:
    top = module.split(".")[0]
    return next(i for i, names in enumerate(LAYERS) if top in names)


def _imports(path: Path) -> set[str]:
    """ropebridge modules ``path`` imports, as dotted names below the package, outside ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}
    here = path.relative_to(PACKAGE).with_suffix("").parts
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = list(here[: len(here) - node.level])
        target = ".".join(base + ([node.module] if node.module else []))
        if target:
            out.add(target)
        else:  # from . import x (the package itself): each name is a module
            out.update(a.name for a in node.names)
    return out


def test_no_module_imports_a_layer_above_its_own():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        if module in ("__init__", ):
            continue
        for target in _imports(path):
            if target and _layer(target) > _layer(module):
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_the_check_can_fail(tmp_path):
    assert _layer("convert.verify") > _layer("planning") > _layer("checkpoint.model")
    assert "checkpoint.model" in _imports(PACKAGE / "planning.py")
