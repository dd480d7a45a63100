"""The import graph of the ``agentenvs`` namespace: no circles, and the layering of the guide.

Read statically (``ast``) from the source folders that setup.py maps into the namespace, every
``import`` statement counted wherever it is (module level, inside functions, under
``TYPE_CHECKING``): a circle that only a function-level import keeps from failing at import time
is still a circle. An edge goes to the module named (``from pkg import mod`` to ``pkg.mod`` where
that is a module, else to ``pkg``); parent packages are not counted.

Layers (docs/architecture.md): the environment package proper (``agentenvs/*.py`` and
``agentenvs/<env>/``) imports none of the others; ``agents`` imports it; ``replay`` those two;
``train`` those three; ``benchmarks`` and ``integrations`` may import all of them; nothing outside
``integrations`` imports ``integrations``.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Which layers each layer may import (its own included).
ALLOWED: dict[str, frozenset[str]] = {
    "agentenvs": frozenset({"agentenvs"}),
    "agents": frozenset({"agentenvs", "agents"}),
    "replay": frozenset({"agentenvs", "agents", "replay"}),
    "train": frozenset({"agentenvs", "agents", "replay", "train"}),
    "benchmarks": frozenset({"agentenvs", "agents", "replay", "train", "benchmarks"}),
    "integrations": frozenset(
        {"agentenvs", "agents", "replay", "train", "benchmarks", "integrations"}
    ),
}


def package_map(root: Path) -> dict[str, str]:
    """setup.py's ``FOLDERS`` (import name -> folder), read without running setup.py."""
    tree = ast.parse((root / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "FOLDERS" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no FOLDERS mapping")


def modules(root: Path, folders: Mapping[str, str]) -> dict[str, tuple[Path, bool]]:
    """Every module's dotted name -> (its file, whether it is a package's ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for package, folder in folders.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join([package, *parts])] = (path, is_package)
    return found


def _resolve(name: str, known: Mapping[str, object]) -> str | None:
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name if name in known else None


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the namespace it imports."""
    known = modules(root, package_map(root))
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in known.items():
        here = name if is_package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            named: list[str] = []
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                named = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in node.names
                ]
            for target in named:
                resolved = _resolve(target, known)
                if resolved is not None and resolved != name:
                    targets.add(resolved)
        graph[name] = targets
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def layer(module: str) -> str:
    """``agentenvs.train.rl.update`` -> ``train``; the environment package proper ->
    ``agentenvs``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else "agentenvs"


def layering_violations(graph: Mapping[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} ({layer(module)}) imports {target} ({layer(target)})"
        for module, targets in graph.items()
        for target in targets
        if layer(target) not in ALLOWED[layer(module)]
    )


# --- the project ---------------------------------------------------------------------------


def test_no_import_circles():
    assert circles(import_graph(ROOT)) == []


def test_layering():
    assert layering_violations(import_graph(ROOT)) == []


def test_graph_covers_every_folder():
    graph = import_graph(ROOT)
    assert {layer(m) for m in graph} == set(ALLOWED)
    # function-level imports count: the registry builds every backend lazily
    assert "agentenvs.agents.backends.openai_backend" in graph["agentenvs.agents.registry"]


# --- the checker catches what it should ----------------------------------------------------


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    folders = {
        "agentenvs": "agentenvs",
        **{f"agentenvs.{f}": f for f in ALLOWED if f != "agentenvs"},
    }
    (root / "setup.py").write_text(f"FOLDERS = {folders!r}\n")
    for folder in folders.values():
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").touch()
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_circle_through_a_function_level_import_is_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "agents/a.py": "from agentenvs.agents.b import x\n",
            "agents/b.py": "def x():\n    from . import a\n",
            "agents/c.py": "from agentenvs.agents import a\n",
        },
    )
    assert circles(import_graph(root)) == [["agentenvs.agents.a", "agentenvs.agents.b"]]


def test_a_longer_circle_is_one_component(tmp_path):
    root = _tree(
        tmp_path,
        {
            "train/a.py": "import agentenvs.train.b\n",
            "train/b.py": "from agentenvs.train.sub import c\n",
            "train/sub/c.py": "from ..a import thing\n",
        },
    )
    assert circles(import_graph(root)) == [
        ["agentenvs.train.a", "agentenvs.train.b", "agentenvs.train.sub.c"]
    ]


def test_layering_violations_are_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "agentenvs/core.py": "def f():\n    from agentenvs.agents.policy import Policy\n",
            "agents/policy.py": "from agentenvs.core import f\n",
            "benchmarks/run.py": "import agentenvs.integrations.trl\n",
            "integrations/trl.py": "from agentenvs.benchmarks import run\n",
        },
    )
    assert layering_violations(import_graph(root)) == [
        "agentenvs.benchmarks.run (benchmarks) imports agentenvs.integrations.trl (integrations)",
        "agentenvs.core (agentenvs) imports agentenvs.agents.policy (agents)",
    ]
