"""Fixtures of the packaging tests: the wheel built from this checkout, and fresh venvs that install
it the way a user does (no editable install, no repository on the path)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        cwd=out,
    )
    (found,) = out.glob("agentenvs-*.whl")
    return found


class FreshVenv:
    """A new venv in ``path``; commands run with its ``bin`` first on PATH, from a folder outside
    the repository (so ``import agentenvs`` is the installed wheel's)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        venv.create(path, with_pip=True)
        self.bin = path / "bin"
        self.python = str(self.bin / "python")
        self.cwd = path / "work"
        self.cwd.mkdir()
        self.env = {
            **os.environ,
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "AGENTENVS_CACHE": str(path / "cache"),
            "PYTHONNOUSERSITE": "1",
        }
        self.env.pop("PYTHONPATH", None)
        self.env.pop("VIRTUAL_ENV", None)
        # the pip a user has (make install upgrades it the same way)
        self.pip("install", "-q", "--upgrade", "pip", "setuptools", "wheel")

    def run(
        self, *args: str, timeout: float = 1800, check: bool = True
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            list(args), cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        command = " ".join(args)
        assert proc.returncode == 0 or not check, (
            f"{command} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        return proc

    def timed(self, *args: str, timeout: float = 3600) -> float:
        start = time.perf_counter()
        self.run(*args, timeout=timeout)
        return time.perf_counter() - start

    def pip(self, *args: str, timeout: float = 3600) -> float:
        return self.timed(self.python, "-m", "pip", *args, timeout=timeout)

    def check(self) -> None:
        """``pip check`` is clean but for one known false report: textworld 1.7.0's wheel writes
        its compressed tag set on one ``Tag:`` line of its WHEEL file (the wheel format wants one
        tag a line), so pip's platform check, which reads the lines as single tags, calls it "not
        supported on this platform"; the wheel installs and runs (the ALFWorld tests play it)."""
        proc = subprocess.run(
            [self.python, "-m", "pip", "check"],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        known = {"textworld 1.7.0 is not supported on this platform"}
        problems = [
            line
            for line in proc.stdout.splitlines()
            if line.strip() and line.strip() not in known and "No broken" not in line
        ]
        assert not problems, proc.stdout

    def install_torch(self) -> float:
        """torch's build for this machine, as ``make install`` chooses it (the local CPU wheel
        here, never a CUDA download)."""
        return self.timed("bash", str(ROOT / "scripts" / "install_torch.sh"), self.python)

    def python_ok(self, code: str, timeout: float = 1800) -> str:
        return self.run(self.python, "-c", code, timeout=timeout).stdout


@pytest.fixture
def fresh_venv(tmp_path) -> FreshVenv:
    return FreshVenv(tmp_path / "venv")
