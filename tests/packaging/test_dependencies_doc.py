"""docs/dependencies.md and the protocol table of docs/serving.md, as
scripts/write_dependencies_doc.py writes them, are current with pyproject.toml: every pinned or
capped requirement has its row and its reason (the script refuses to write one without), and
every protocol dependency its row. The newest releases are not looked up here (no index)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location(
        "write_dependencies_doc", ROOT / "scripts" / "write_dependencies_doc.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_held_requirement_has_its_reason_and_row():
    script = load_script()
    held = [r for r in script.requirements() if r.is_held]
    assert {r.name for r in held} >= {"trl", "verl", "transformers", "openenv", "alfworld"}
    assert not {r.name for r in held} - script.REASONS.keys()
    doc = (ROOT / "docs" / "dependencies.md").read_text()
    for r in held:
        assert f"| {r.name} | {r.extra} | `{r.specifier}` |" in doc, r
    for name in script.floors(script.requirements()):
        assert f"| {name} | `" in doc, name
    assert "- machine: " in doc and "- date: " in doc


def test_held_and_floor_rules():
    script = load_script()
    from packaging.specifiers import SpecifierSet

    capped = script.Held("openenv", "serve", SpecifierSet(">=0.10,<0.11"))
    assert capped.is_held and script.newest_allowed(capped, "0.10.0") == "yes"
    assert script.newest_allowed(capped, "0.11.0") == "no"
    assert not script.Held("numpy", "core", SpecifierSet(">=1.26")).is_held


def test_serving_doc_has_the_protocol_table():
    script = load_script()
    text = (ROOT / "docs" / "serving.md").read_text()
    start, end = (text.index(m) for m in script.MARKERS)
    table = text[start:end]
    for _, name, _, _ in script.PROTOCOL_ROWS:
        assert f"| {name} | " in table, name
