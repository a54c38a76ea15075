"""The layout DESIGN.md and docs/architecture.md describe, checked from the source: the modules of
`dse` and `kernels` import each other without a cycle (function-level imports included), the
kernels import nothing from `dse` (they never see configs, files or the CLI), at most
MAX_TOP_MODULES modules sit directly in dse/ (the rest in the subpackages of their stage), and no
module passes MAX_MODULE_LINES lines or lacks a docstring saying what it owns."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dse", "kernels")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of PACKAGES it imports anywhere in its source."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    full = f"{base}.{a.name}"
                    targets.add(full if full in mods else base)
        graph[name] = {t for t in targets if t in mods and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_kernels_import_nothing_from_dse():
    graph = import_graph()
    wrong = {m: sorted(t for t in ts if t.split(".")[0] == "dse") for m, ts in graph.items() if m.startswith("kernels")}
    assert {m: ts for m, ts in wrong.items() if ts} == {}


def test_the_checker_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "kernels.fabrics" in import_graph()["kernels.collectives"]


#: Modules allowed directly in dse/ besides __init__.py: the rest live in the subpackages of
#: their stage of the flow (docs/architecture.md).
MAX_TOP_MODULES = 12
#: Lines a module may hold: past it, it holds more than one idea.
MAX_MODULE_LINES = 600


def top_modules(root: Path = ROOT / "dse") -> list[str]:
    return sorted(p.name for p in root.glob("*.py") if p.name != "__init__.py")


def long_modules(limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    lines = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in modules().values()}
    return {p: n for p, n in lines.items() if n > limit}


def test_few_modules_sit_directly_in_dse():
    assert len(top_modules()) <= MAX_TOP_MODULES, top_modules()


def test_no_module_passes_its_line_limit():
    assert long_modules() == {}


def test_every_module_says_what_it_owns():
    """A module docstring whose first line is a sentence, in every module of dse and kernels."""
    missing = [name for name, path in modules().items()
               if not (ast.get_docstring(ast.parse(path.read_text())) or "").strip()]
    assert missing == []


def test_the_layout_checks_can_fail(tmp_path):
    """The two limits are not vacuous: a thirteenth top module and a 601-line module are caught."""
    for i in range(MAX_TOP_MODULES + 1):
        (tmp_path / f"m{i}.py").write_text('"""m."""\n')
    (tmp_path / "__init__.py").write_text("")
    assert len(top_modules(tmp_path)) == MAX_TOP_MODULES + 1 > MAX_TOP_MODULES
    assert long_modules(limit=0)  # every module is longer than 0 lines
