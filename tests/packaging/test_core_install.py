"""The console script on the core install (no extras): every subcommand's ``--help`` works, and a
command whose extra is missing says so in one line, naming the extra, with no traceback.

The core install is simulated in a subprocess: an import finder placed first on ``sys.meta_path``
refuses every module that is neither the standard library nor part of the core install (agentenvs
and the distributions its required dependencies pull in, read from the installed metadata), as a
missing package would. ``EXTRAS`` (the extra each optional module comes from) is held to
pyproject.toml here too.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from agentenvs.cli import COMMANDS
from agentenvs.cli_errors import EXTRAS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]

CORE_ONLY = """
import json, sys
ALLOWED = set(json.loads(sys.argv[1]))

class CoreInstall:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in ALLOWED or top.startswith("_"):
            return None
        raise ModuleNotFoundError(f"No module named {top!r}", name=top)

sys.meta_path.insert(0, CoreInstall())
from agentenvs.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _core_distributions() -> set[str]:
    """agentenvs and every distribution its required (not extra) dependencies pull in."""
    seen: set[str] = set()
    todo = ["agentenvs"]
    while todo:
        name = todo.pop()
        key = name.lower().replace("-", "_")
        if key in seen:
            continue
        seen.add(key)
        for line in md.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _core_modules() -> list[str]:
    core = _core_distributions()
    found = {
        module
        for module, dists in md.packages_distributions().items()
        if any(d.lower().replace("-", "_") in core for d in dists)
    }
    return sorted(found | {"agentenvs"})


def core_cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CORE_ONLY, json.dumps(_core_modules()), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_the_simulated_core_install_refuses_the_extras():
    proc = core_cli("train", "rl", "--algo", "grpo")
    assert "torch" not in _core_modules() and "gymnasium" in _core_modules()
    assert proc.returncode == 1, proc.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_help_works_on_the_core_install(command):
    proc = core_cli(*command.split(), "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: agentenvs {command}"), proc.stdout[:200]


# a command and what it needs beyond the core install -> the extra its one line names
MISSING = [
    (["train", "rl", "--algo", "grpo", "--model", "m"], "llm", "needs torch and transformers"),
    (["train", "sft", "--model", "m", "--data", "d.jsonl"], "llm", "needs torch and transformers"),
    (["serve", "TextCraft-v0"], "serve", "needs fastapi, uvicorn and orjson"),
    (["serve", "TextCraft-v0", "--api", "openenv"], "serve", "openenv"),
    (
        ["eval", "TextCraft-v0", "--agent", "embedded", "--limit", "1", "-k", "1", "--no-progress"],
        "llm",
        "torch",
    ),
    (
        ["eval", "BabyAI-Text-v0", "--agent", "expert", "--limit", "1", "-k", "1", "--no-progress"],
        "babyai",
        "",
    ),
    (["play", "ALFWorld-v0"], "alfworld", ""),
    (["replay", "cuts", "TRAJ", "--model", "m", "-o", "q.jsonl"], "llm", "torch"),
]


@pytest.mark.parametrize("argv,extra,says", MISSING, ids=[" ".join(m[0][:2]) for m in MISSING])
def test_a_missing_extra_is_one_line_naming_it(argv, extra, says, tmp_path):
    from agentenvs.agents.trajectory import write_trajectories
    from agentenvs.benchmarks.learning.check import expert_trajectories

    (tmp_path / "m").mkdir()  # a saved model's directory, as far as the argument checks go
    (tmp_path / "m" / "config.json").write_text("{}")
    if "TRAJ" in argv:
        trajectories = expert_trajectories("TextCraft-v0", ["agentgym/0"])
        write_trajectories(tmp_path / "t.jsonl", trajectories)
        argv = [str(tmp_path / "t.jsonl") if a == "TRAJ" else a for a in argv]
    proc = core_cli(*argv, cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    command = " ".join(argv[:2]) if argv[0] in ("train", "replay") else argv[0]
    assert lines[0].startswith(f"agentenvs {command}: "), lines[0]
    assert f"pip install 'agentenvs[{extra}]'" in lines[0] and says in lines[0], lines[0]


def _extra_distributions(extras: dict[str, list[str]], extra: str) -> set[str]:
    """The distributions ``extra`` requires, through its references to other extras."""
    out: set[str] = set()
    for line in extras[extra]:
        req = Requirement(line)
        if req.name == "agentenvs":
            for inner in req.extras:
                out |= _extra_distributions(extras, inner)
        else:
            out.add(req.name.lower().replace("-", "_"))
    return out


def test_extras_table_matches_pyproject():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    providers = md.packages_distributions()
    for extra, modules in EXTRAS.items():
        assert extra in extras, extra
        wanted = _extra_distributions(extras, extra)
        for module in modules:
            dists = {d.lower().replace("-", "_") for d in providers.get(module, [module])}
            assert dists & wanted, f"{module} ({dists}) is not a requirement of [{extra}]"


def test_an_import_error_of_an_installed_module_is_not_a_missing_extra():
    from agentenvs.cli_errors import MissingExtraError, missing_extra

    broken = ImportError("cannot import name 'nope' from 'torch'", name="torch")
    assert missing_extra(broken) is None  # torch is installed here: a real error, re-raised
    absent = ModuleNotFoundError("No module named 'minigridx'", name="minigridx")
    assert missing_extra(absent) is None  # not a module of any extra
    named = MissingExtraError("needs fastapi: pip install 'agentenvs[serve]'", name="fastapi")
    assert missing_extra(named) == "needs fastapi: pip install 'agentenvs[serve]'"
