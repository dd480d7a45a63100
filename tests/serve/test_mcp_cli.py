"""``agentenvs mcp`` on an install without the extras: ``--help`` works and running it is one
line naming ``agentenvs[mcp]`` (the core install simulated as tests/packaging does it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _core_cli():
    path = ROOT / "tests" / "packaging" / "test_core_install.py"
    spec = importlib.util.spec_from_file_location("core_install_for_mcp", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.core_cli


def test_mcp_without_the_extra_is_one_line_naming_it(tmp_path: Path) -> None:
    core_cli = _core_cli()
    shown = core_cli("mcp", "--help", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith("usage: agentenvs mcp"), shown.stderr
    proc = core_cli("mcp", "TextCraft-v0", cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0] == "agentenvs mcp: needs mcp: pip install 'agentenvs[mcp]'", lines[0]
    proc = core_cli("serve", "TextCraft-v0", "--api", "mcp", cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "pip install 'agentenvs[serve]'" in lines[0] and "mcp" in lines[0], lines[0]
