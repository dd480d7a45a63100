"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_SITECUSTOMIZE = '''\
"""Make the modules of $AGENTENVS_TEST_BLOCKED unimportable, as if they were not installed.
With $AGENTENVS_TEST_BLOCK_CHILDREN set, only in the processes this one starts (spawned
environment workers), not in this one."""
import os
import sys

_names = os.environ.get("AGENTENVS_TEST_BLOCKED", "")
if os.environ.get("AGENTENVS_TEST_BLOCK_CHILDREN") and "AGENTENVS_TEST_PARENT" not in os.environ:
    os.environ["AGENTENVS_TEST_PARENT"] = str(os.getpid())
    _names = ""
for _name in filter(None, _names.split(",")):
    sys.modules[_name] = None  # `import name` raises ModuleNotFoundError(name=name)
'''


@pytest.fixture
def without_modules(tmp_path: Path) -> Callable[..., dict[str, str]]:
    """``without_modules("minigrid", ...)``: the environment of a Python subprocess in which
    those modules do not import (a ``sitecustomize`` on ``PYTHONPATH`` puts None in
    ``sys.modules`` for them, which is what Python does for a blocked import);
    ``children_only=True``: only in the processes that subprocess spawns."""
    shim = tmp_path / "blocked-imports"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(_SITECUSTOMIZE)

    def environ(*names: str, children_only: bool = False) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTENVS_TEST_")}
        path = [str(shim), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(path)
        env["AGENTENVS_TEST_BLOCKED"] = ",".join(names)
        if children_only:
            env["AGENTENVS_TEST_BLOCK_CHILDREN"] = "1"
        return env

    return environ


@pytest.fixture(autouse=True)
def _forget_benchmark_environments() -> Iterator[None]:
    """A test that ran the learning benchmark in this process leaves its process-only
    environments (KeyDoor-v0, Sokoban-oracle-v0) behind; the next test starts without them."""
    yield
    module = sys.modules.get("agentenvs.benchmarks.learning.plugins")
    if module is not None:
        module.unregister_benchmark_envs()
