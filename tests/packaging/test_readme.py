"""The README cannot rot: it stays under 12 KB, its links resolve, every shell command in it parses
with the real command's own parser (and the cheap ones run), and its Python snippets run (the TRL
one on the tiny model instead of the hub model it names).

The verl command is composed with verl's own trainer config by
``tests/integrations/test_verl_config.py``."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_BYTES = 12 * 1024
WRITTEN_ELSEWHERE: set[str] = set()  # links to files another command writes
# Commands run for real (cheap, offline); every other command is parsed only.
RUN = (
    "agentenvs eval TextCraft-v0 --agent expert -k 1 --limit 4",
    "agentenvs list",
    "agentenvs play --help",
)


def fenced(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def shell_commands() -> list[str]:
    """Every command of the README's bash blocks: continuations joined, comments dropped,
    ``NAME=value`` lines applied to the later commands' ``$NAME``."""
    variables: dict[str, str] = {}
    commands = []
    for block in fenced("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if not line or line.startswith("#"):
                continue
            if m := re.fullmatch(r"([A-Z_]+)=(\S+)", line):
                variables[m.group(1)] = m.group(2)
                continue
            for name, value in variables.items():
                line = line.replace(f"${name}", value)
            commands.append(line)
    return commands


class Parsed(Exception):
    """Raised by the patched ``parse_args`` once the command's parser accepted its argv."""


@pytest.fixture
def parse_only(monkeypatch):
    """``ArgumentParser.parse_args`` (and ``parse_intermixed_args``: flags among the
    ``key=value`` settings) parses (exiting 2 on a bad flag, as the command would) and then stops
    the command before it does anything."""
    for name in ("parse_args", "parse_intermixed_args"):
        original = getattr(argparse.ArgumentParser, name)

        def parse_and_stop(self, args=None, namespace=None, _parse=original):
            raise Parsed(_parse(self, args, namespace))

        monkeypatch.setattr(argparse.ArgumentParser, name, parse_and_stop)


def parse_command(words: list[str]) -> None:
    """Run the entry point of an ``agentenvs ...`` or ``python -m MODULE ...`` command with the
    patched parser: it must reach ``parse_args`` and be accepted."""
    if words[0] == "agentenvs":
        from agentenvs.cli import main

        call = lambda: main(words[1:])  # noqa: E731
    else:
        module = importlib.import_module(words[2])
        call = lambda: module.main(words[3:])  # noqa: E731
    if "--help" in words:
        with pytest.raises(SystemExit) as exit_:
            call()
        assert exit_.value.code == 0, words
        return
    with pytest.raises(Parsed):
        call()


def test_readme_is_short():
    assert len(README.read_bytes()) <= MAX_BYTES


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if target.startswith("http") or target in WRITTEN_ELSEWHERE:
            continue
        assert (ROOT / target).exists(), target


def test_every_environment_has_its_fidelity_notes():
    text = README.read_text()
    for env_id in ("TextCraft-v0", "BabyAI-Text-v0", "ALFWorld-v0", "WebShop-v0", "Sokoban-v0"):
        assert f"(docs/environments/{env_id}.md)" in text
        assert (
            (ROOT / "docs" / "environments" / f"{env_id}.md").read_text().startswith(f"# {env_id}")
        )


def test_readme_commands_parse(parse_only):
    extras = set(importlib.metadata.metadata("agentenvs").get_all("Provides-Extra"))
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    kinds = set()
    for command in shell_commands():
        words = shlex.split(command)
        if words[0] == "make":
            assert words[1] in targets, command
        elif words[:2] == ["pip", "install"]:
            (spec,) = words[2:]
            named = re.fullmatch(r"agentenvs\[([\w,]+)\]", spec).group(1).split(",")
            assert set(named) <= extras, command
        elif words[0] == "torchrun":
            parse_command(["agentenvs", *words[words.index("agentenvs.cli") + 1 :]])
        elif words[:3] == ["python", "-m", "verl.trainer.main_ppo"]:
            continue  # composed with verl's config: tests/integrations/test_verl_config.py
        elif words[0] == "agentenvs" or words[:2] == ["python", "-m"]:
            parse_command(words)
        else:
            raise AssertionError(f"the README test does not know how to check: {command}")
        kinds.add(words[0])
    assert {"make", "pip", "agentenvs", "torchrun"} <= kinds


def test_readme_cheap_commands_run(tmp_path):
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    ran = 0
    for command in shell_commands():
        if not command.startswith(RUN):
            continue
        proc = subprocess.run(
            shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        ran += 1
    assert ran == len(RUN)
    assert (tmp_path / "runs" / "eval-expert" / "results.json").is_file()


def test_readme_environment_snippet_runs(capsys):
    (snippet,) = [b for b in fenced("python") if "gym.make(" in b]
    exec(compile(snippet, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "{'got': {'count': 1, 'item': 'oak logs'}}" in printed


def test_readme_trl_snippet_runs_on_the_tiny_model(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    from agentenvs.agents.tiny_model import build_tiny_model

    (snippet,) = [b for b in fenced("python") if "GRPOTrainer(" in b]
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    # the tiny model with a chat template that renders tool calls (TRL's Qwen2.5 one), as the
    # hub model's does
    model = build_tiny_model(tmp_path / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.save_pretrained(model)
    assert '"Qwen/Qwen3-1.7B"' in snippet
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    on_cpu = snippet.replace("GRPOConfig(", "GRPOConfig(use_cpu=True, ")  # no GPU here
    exec(
        compile(on_cpu.replace('"Qwen/Qwen3-1.7B"', repr(str(model))), "README.md", "exec"),
        namespace,
    )
    assert len(namespace["trainer"].train_dataset) > 0
