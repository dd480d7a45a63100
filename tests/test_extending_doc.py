"""docs/extending.md's worked examples run: the environment's files are the test plugin's
(``tests/plugins/guess``, which tests/test_plugins.py installs and runs every command on), and
the RL algorithm and LLM backend examples are executed as the page shows them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "extending.md"
GUESS = ROOT / "tests" / "plugins" / "guess"


def blocks(marker: str) -> dict[str, str]:
    """The code blocks that follow ``<!-- MARKER: NAME -->`` lines, by NAME."""
    pattern = rf"<!-- {marker}: (\S+) -->\n```\w*\n(.*?)```"
    return dict(re.findall(pattern, DOC.read_text(), flags=re.DOTALL))


def run_examples(tmp_path: Path, *names: str, then: str = "") -> None:
    """The named examples, one after another, and ``then``, in a new process in ``tmp_path``."""
    examples = blocks("example")
    script = "\n\n".join([*(examples[n] for n in names), then])
    (tmp_path / "example.py").write_text(script)
    proc = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_the_environment_files_are_the_test_plugins() -> None:
    files = blocks("file")
    shipped = {
        str(p.relative_to(ROOT))
        for p in GUESS.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p)
    }
    assert set(files) == shipped, "every file of the test plugin is shown, and only those"
    for path, text in files.items():
        assert text == (ROOT / path).read_text(), f"docs/extending.md's {path} differs"


def test_the_backend_example(tmp_path: Path) -> None:
    run_examples(tmp_path, "backend")


RL_CHECKS = """
import torch
from agentenvs.train.advantages import get_advantage_estimator
from agentenvs.train.loss_registry import get_policy_loss
from agentenvs.train.losses import PolicyLossConfig

batch = AdvantageBatch(
    rewards=torch.tensor([1.0, 0.0, 0.0, 2.0]),
    response_mask=torch.ones(4, 3),
    group_index=["a", "a", "a", "b"],
)
result = get_advantage_estimator("rloo")(batch)
assert result.step_advantages.tolist() == [1.0, -0.5, -0.5, 0.0], result.step_advantages
log_prob = torch.zeros(4, 3, requires_grad=True)
inputs = LossInputs(log_prob, log_prob.detach(), result.token_advantages, batch.response_mask)
loss, metrics = get_policy_loss("reinforce")(inputs, PolicyLossConfig())
loss.backward()
assert "actor/total_loss" in metrics and log_prob.grad[0, 0] < 0 < log_prob.grad[1, 0]
assert ALGORITHMS["rloo"].estimator == "rloo"
"""


def test_the_rl_algorithm_example(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    run_examples(tmp_path, "rl", then=RL_CHECKS)


@pytest.mark.slow  # a model build and one RL iteration: about 40 s on 2 cores
def test_the_rl_algorithm_example_trains(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    run_examples(tmp_path, "rl", "rl-train")
    lines = (tmp_path / "runs" / "rloo" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["rollout/episodes"] == 2
