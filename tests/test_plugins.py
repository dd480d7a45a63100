"""Environment plugins: a package of its own adds an environment and every tool works on it.

``tests/plugins/guess`` is a guess-the-number environment in a distribution of its own
(``guess-env``), installed by pip into a temporary folder (the project's virtual environment is
untouched) and put on ``PYTHONPATH`` for the commands run here. With no edit to agentenvs, it
passes :func:`agentenvs.checker.check_plugin`, and ``agentenvs list``, ``eval`` (the expert and
``random``), ``serve`` (both APIs, the batch routes), ``view``, ``replay cuts`` / ``validate`` and
one ``train rl`` iteration run on it (the openenv server and the RL iteration are marked slow:
``.ci/run`` runs them). Broken plugins (written here as distributions on
``sys.path``) are one error naming their distribution, and the five environments keep working.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUESS = ROOT / "tests" / "plugins" / "guess"
OURS = {"TextCraft-v0", "Sokoban-v0", "ALFWorld-v0", "WebShop-v0", "BabyAI-Text-v0"}


def install_plugin(source: Path, target: Path) -> Path:
    """``pip install --no-deps`` of the package at ``source`` into ``target`` (built from a copy,
    so that the source folder gets no build output); returns ``target``."""
    build = target.parent / f"{source.name}-src"
    shutil.copytree(source, build, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "--target", str(target), str(build)],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


@pytest.fixture(scope="session")
def guess_site(tmp_path_factory) -> Path:
    """The folder the guess-env distribution is installed in."""
    return install_plugin(GUESS, tmp_path_factory.mktemp("guess") / "site")


def environ(*paths: Path) -> dict[str, str]:
    old = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), *old])}


def agentenvs(
    site: Path, *args: str, cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``agentenvs ARGS`` in a new process that sees the distributions installed in ``site``."""
    return subprocess.run(
        [sys.executable, "-m", "agentenvs.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environ(site),
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def on_path(site: Path) -> Iterator[None]:
    """The distributions in ``site`` visible to this process for the block."""
    import gymnasium as gym

    from agentenvs.plugins import plugins, refresh_plugins

    before = set(plugins())
    sys.path.insert(0, str(site))
    refresh_plugins()
    try:
        yield
    finally:
        sys.path.remove(str(site))
        for name in [m for m in sys.modules if m.split(".")[0] in _modules(site)]:
            del sys.modules[name]
        refresh_plugins()
        for env_id in set(gym.registry) - before:
            if env_id not in plugins() and "/" not in env_id and env_id.endswith("-v0"):
                gym.registry.pop(env_id, None)


def _modules(site: Path) -> set[str]:
    return {p.stem for p in site.iterdir() if not p.name.endswith(("-info", ".pth"))}


# --------------------------------------------------------------------------------------------
# The guess-env plugin, with no edit to agentenvs


def test_the_plugin_passes_the_checker(guess_site: Path) -> None:
    from agentenvs.checker import check_plugin
    from agentenvs.plugins import source

    with on_path(guess_site):
        check_plugin("Guess-v0")
        assert source("Guess-v0").distribution == "guess-env"


def test_its_tables_read_the_plugin(guess_site: Path) -> None:
    from agentenvs.agents.prompts import PROMPTS, env_prompt
    from agentenvs.agents.protocols import DEFAULT_PROTOCOLS, PROTOCOLS, env_protocol
    from agentenvs.expert import EXPERTS, make_expert
    from agentenvs.registration import ENVIRONMENTS

    with on_path(guess_site):
        assert set(ENVIRONMENTS) == OURS | {"Guess-v0"}
        assert EXPERTS["Guess-v0"] == "guess_env.expert:GuessExpert"
        assert type(make_expert("Guess-v0")).__name__ == "GuessExpert"
        assert env_prompt("Guess-v0").name == "guess-default" and "Guess-v0" in PROMPTS
        assert DEFAULT_PROTOCOLS["Guess-v0"] == "guess-basic"
        assert env_protocol(None, "Guess-v0").prompt == "guess-default"
        assert set(PROTOCOLS["guess-basic"].envs) == {"Guess-v0"}
    assert "Guess-v0" not in ENVIRONMENTS and "guess-basic" not in PROTOCOLS


def test_list_eval_view_and_replay(guess_site: Path, tmp_path: Path) -> None:
    listed = agentenvs(guess_site, "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("Guess-v0"))
    assert "train: 30, test: 10" in row
    assert {line.split()[0] for line in listed.stdout.splitlines()} == OURS | {"Guess-v0"}

    results = {}
    for agent, k in (("expert", 1), ("random:1", 2)):
        out = tmp_path / agent.replace(":", "-")
        run = agentenvs(guess_site, "eval", "Guess-v0", "--agent", agent, "-k", k, "--out", out,
                        "--no-progress", cwd=tmp_path)  # fmt: skip
        assert run.returncode == 0, run.stderr
        results[agent] = json.loads((out / "results.json").read_text())
        assert results[agent]["env_id"] == "Guess-v0"
        assert results[agent]["protocol"] == "guess-basic"
    overall = {a: r["rows"][-1] for a, r in results.items()}
    assert overall["expert"]["avg_at_k"] == 1.0 and overall["expert"]["samples"] == 10
    assert overall["random:1"]["samples"] == 20 and overall["random:1"]["errors"] == 0

    page = tmp_path / "view.html"
    view = agentenvs(guess_site, "view", "--export", page, tmp_path / "expert", cwd=tmp_path)
    assert view.returncode == 0, view.stderr
    assert "Guess-v0" in page.read_text()

    queries, validated = tmp_path / "queries.jsonl", tmp_path / "validated.jsonl"
    cuts = agentenvs(guess_site, "replay", "cuts", "--strategy", "fixed-ratio", "--ratios",
                     "0.3,0.6", "-o", queries, "--no-progress", tmp_path / "expert" /
                     "trajectories.jsonl", cwd=tmp_path)  # fmt: skip
    assert cuts.returncode == 0, cuts.stderr
    check = agentenvs(guess_site, "replay", "validate", "-o", validated, "--no-progress",
                      queries, cwd=tmp_path)  # fmt: skip
    assert check.returncode == 0, check.stderr
    rows = [json.loads(line) for line in validated.read_text().splitlines()]
    assert len(rows) == 20 and {r["env_id"] for r in rows} == {"Guess-v0"}
    assert {r["status"] for r in rows} == {"validated"}


@contextlib.contextmanager
def serving(site: Path, api: str, cwd: Path) -> Iterator[str]:
    """``agentenvs serve Guess-v0 --api API`` in its own process; yields its URL."""
    import requests

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentenvs.cli", "serve", "Guess-v0", "--api", api]
        + ["--port", str(port)],
        cwd=cwd,
        env=environ(site),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"agentenvs serve exited: {proc.stderr.read()[-2000:]}")
            with contextlib.suppress(requests.ConnectionError):
                requests.get(url + "/agentenvs/v1/health", timeout=2)
                break
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _native_episode(url: str) -> None:
    """One won episode on the native routes, single and batched (the expert's guesses on
    guess/30, whose number is 4: 5 too high, 2 too low, 3 too low, 4)."""
    import requests

    v1 = url + "/agentenvs/v1"
    http = requests.Session()
    sessions = [http.post(v1 + "/sessions", json={}, timeout=30).json()["session"] for _ in "ab"]
    first = http.post(v1 + "/reset", json={"session": sessions[0], "task_id": "guess/30"}).json()
    assert first["info"]["task_id"] == "guess/30" and first["info"]["turn"] == 0
    resets = http.post(
        v1 + "/reset_batch", json={"resets": [{"session": sessions[1], "task_id": "guess/30"}]}
    ).json()["results"]
    assert resets[0]["status"] == 200 and resets[0]["observation"] == first["observation"]
    for action in ("guess 5", "guess 2", "guess 3", "guess 4"):
        single = http.post(v1 + "/step", json={"session": sessions[0], "action": action}).json()
        (batched,) = http.post(
            v1 + "/step_batch", json={"steps": [{"session": sessions[1], "action": action}]}
        ).json()["results"]
        assert batched.pop("status") == 200 and batched == single
    assert single["info"]["won"] and single["reward"] == 1.0 and single["terminated"]


@pytest.mark.parametrize(
    "api",
    ["agentgym", pytest.param("openenv", marks=pytest.mark.slow)],  # openenv's import: ~30 s
)
def test_serve_on_both_apis_with_the_batch_routes(guess_site: Path, tmp_path: Path, api) -> None:
    pytest.importorskip("fastapi")
    if api == "openenv":
        pytest.importorskip("openenv")
    with serving(guess_site, api, tmp_path) as url:
        _native_episode(url)
        if api == "openenv":
            from openenv import GenericEnvClient

            with GenericEnvClient(base_url=url).sync() as env:
                result = env.reset(task_id="guess/30")
                assert result.observation["info"]["task_id"] == "guess/30" and not result.done
                result = env.step({"action": "guess 4"})
                assert result.done and result.reward == 1.0


@pytest.mark.slow  # about a minute on 2 cores (torch, transformers, the model's build)
def test_one_rl_iteration_with_the_test_model(guess_site: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentenvs.agents.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "model")
    out = tmp_path / "rl"
    run = agentenvs(guess_site, "train", "rl", "--algo", "grpo", "--model", model, "--out", out,
                    "--no-progress", "iterations=1", "prompts_per_iteration=1",
                    "samples_per_prompt=2", "rollout.max_turns=2", "rollout.max_new_tokens=16",
                    "data.env_id=Guess-v0", "data.tasks=guess/0", "tensorboard=false",
                    cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert (out / "checkpoints" / "step-0000001" / "model" / "config.json").exists()
    (metrics,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["rollout/episodes"] == 2
    assert json.loads((out / "protocol.json").read_text())["protocol"] == "guess-basic"


# --------------------------------------------------------------------------------------------
# Broken plugins: one error naming the distribution and the fault; the others work


def write_distribution(site: Path, name: str, entry_points: dict[str, str], modules: dict) -> Path:
    """A distribution ``name`` installed in ``site`` (a ``.dist-info`` folder with its entry
    points in ``agentenvs.envs``, and ``modules``: file name -> source)."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("[agentenvs.envs]\n" + "\n".join(lines) + "\n")
    for file, text in modules.items():
        (site / file).write_text(text)
    return site


_GOOD = "from agentenvs.plugins import EnvPlugin\n"
BROKEN = {
    # entry point name -> (its value, the modules, what the error must say)
    "Missing-v0": ("no_such_module:PLUGIN", {}, "ModuleNotFoundError"),
    "Raising-v0": (
        "raising_plugin:PLUGIN",
        {"raising_plugin.py": "import not_installed_dependency\n"},
        "not_installed_dependency",
    ),
    "NotAPlugin-v0": ("notaplugin:PLUGIN", {"notaplugin.py": "PLUGIN = 42\n"}, "names a int"),
    "Misnamed-v0": (
        "misnamed:PLUGIN",
        {"misnamed.py": _GOOD + "PLUGIN = EnvPlugin('Other-v0', 'x:Y')\n"},
        "declares env_id 'Other-v0'",
    ),
    "TextCraft-v0": (
        "shadow:PLUGIN",
        {"shadow.py": _GOOD + "PLUGIN = EnvPlugin('TextCraft-v0', 'x:Y')\n"},
        "distribution agentenvs",
    ),
}


@pytest.fixture
def broken_site(tmp_path: Path) -> Path:
    modules = {file: text for _, files, _ in BROKEN.values() for file, text in files.items()}
    entry_points = {name: value for name, (value, _, _) in BROKEN.items()}
    return write_distribution(tmp_path / "site", "broken-env", entry_points, modules)


def test_a_broken_plugin_is_one_error_naming_its_distribution(broken_site: Path) -> None:
    from agentenvs.plugins import PluginError, PluginWarning, broken_plugins
    from agentenvs.registration import ENVIRONMENTS, make

    with pytest.warns(PluginWarning) as caught, on_path(broken_site):
        broken = broken_plugins()
        assert set(broken) == set(BROKEN)
        for name, (_, _, fault) in BROKEN.items():
            message = str(broken[name])
            assert "broken-env 0.1" in message and fault in message, message
        assert set(ENVIRONMENTS) == OURS
        with pytest.raises(PluginError, match="broken-env 0.1.*ModuleNotFoundError"):
            make("Missing-v0")
        env = make("TextCraft-v0")  # ours, not the shadowing plugin
        assert type(env).__module__ == "agentenvs.textcraft.env"
    assert len(caught) >= len(BROKEN)


def test_broken_plugins_on_the_command_line(broken_site: Path, tmp_path: Path) -> None:
    listed = agentenvs(broken_site, "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines() if line.strip()}
    assert OURS <= set(rows) and "max_turns" in rows["Sokoban-v0"]
    assert "broken plugin" in rows["Missing-v0"] and "broken-env" in rows["Missing-v0"]
    run = agentenvs(broken_site, "eval", "Raising-v0", "--agent", "random", "--out",
                    tmp_path / "out", cwd=tmp_path)  # fmt: skip
    assert run.returncode != 0
    assert "broken-env 0.1" in run.stderr and "not_installed_dependency" in run.stderr


def test_a_missing_expert_names_the_distribution(guess_site: Path, tmp_path: Path) -> None:
    """guess-env's plugin with an expert that does not exist: the expert is one error naming
    the distribution; the environment, its random agent and the checker's other parts work."""
    from agentenvs.expert import make_expert
    from agentenvs.plugins import PluginError

    site = tmp_path / "site"
    shutil.copytree(guess_site, site)
    plugin = site / "guess_env" / "plugin.py"
    plugin.write_text(plugin.read_text().replace("GuessExpert", "NoSuchExpert"))
    with on_path(site):
        with pytest.raises(PluginError, match=r"guess-env 0.1.0.*expert.*NoSuchExpert"):
            make_expert("Guess-v0")
    run = agentenvs(site, "eval", "Guess-v0", "--agent", "expert", "--out", tmp_path / "e",
                    "--no-progress", cwd=tmp_path)  # fmt: skip
    assert run.returncode != 0 and "guess-env 0.1.0" in run.stderr and "NoSuchExpert" in run.stderr
    ok = agentenvs(site, "eval", "Guess-v0", "--agent", "random", "-k", "1", "--out",
                   tmp_path / "r", "--no-progress", cwd=tmp_path)  # fmt: skip
    assert ok.returncode == 0, ok.stderr


def test_checker_failures_name_the_rule_and_the_values() -> None:
    from agentenvs.checker import ContractError, check_contract, check_info
    from agentenvs.registration import make

    with pytest.raises(ContractError, match=r"info has the key 'won'.*info_keys"):
        check_info({"task_id": "a", "family": "b"})
    with pytest.raises(ContractError, match=r"info\['turn'\] is of type.*type: 'str'"):
        check_info({k: v for k, v in _info().items()} | {"turn": "3"})
    env = make("TextCraft-v0")
    train_id = env.task_ids("train")[0]
    with pytest.raises(ContractError, match=rf"task_ids\('test'\).*'{train_id}'.*split_size"):
        check_contract(env, train_id, ["inventory"], split="test")


def _info() -> dict:
    return {
        "task_id": "a",
        "family": "b",
        "won": False,
        "valid": True,
        "turn": 0,
        "admissible_actions": None,
        "fields": {},
    }


def test_a_plugins_missing_dependency_names_its_extra(tmp_path: Path) -> None:
    from agentenvs.registration import MissingDependencyError, make

    module = _GOOD + (
        "PLUGIN = EnvPlugin('NeedsDep-v0', 'needsdep_env:Env', extra='needsdep[fast]', "
        "requires=('not_installed_dependency',))\n"
    )
    site = write_distribution(
        tmp_path / "site", "needsdep", {"NeedsDep-v0": "needsdep:PLUGIN"}, {"needsdep.py": module}
    )
    with on_path(site):
        with pytest.raises(MissingDependencyError, match=r"pip install 'needsdep\[fast\]'"):
            make("NeedsDep-v0")


def test_parts_that_do_not_load_fail_alone(guess_site: Path, tmp_path: Path) -> None:
    """guess-env with prompts and protocols that do not import: the environment still makes,
    its prompt and protocol are one error naming the distribution, every other table works."""
    from agentenvs.agents.prompts import PROMPTS, env_prompt
    from agentenvs.agents.protocols import PROTOCOLS, env_protocol
    from agentenvs.plugins import PluginError, PluginWarning
    from agentenvs.registration import make

    site = tmp_path / "site"
    shutil.copytree(guess_site, site)
    plugin = site / "guess_env" / "plugin.py"
    text = plugin.read_text().replace("guess_env.prompts:PROMPTS", "guess_env.nowhere:PROMPTS")
    plugin.write_text(text.replace("guess_env.prompts:PROTOCOLS", "guess_env.prompts:NOTHING"))
    with pytest.warns(PluginWarning), on_path(site):
        assert make("Guess-v0").env_id == "Guess-v0"
        assert set(PROMPTS) == OURS and {"prefix-grpo", "ptgpo"} <= set(PROTOCOLS)
        with pytest.raises(PluginError, match=r"guess-env 0.1.0.*prompts.*guess_env.nowhere"):
            env_prompt("Guess-v0")
        with pytest.raises(PluginError, match=r"guess-env 0.1.0.*protocols.*NOTHING"):
            env_protocol(None, "Guess-v0")
        assert env_prompt("TextCraft-v0").name == "textcraft-paper"


def test_a_plugins_default_keywords_hold_in_every_tool(tmp_path: Path) -> None:
    """A plugin whose ``kwargs`` choose a variant (Sokoban with two boxes): ``gym.make``,
    :func:`agentenvs.build_env` and the server's sessions all make that variant, and a caller's
    keyword still overrides it."""
    from agentenvs.registration import build_env, make
    from agentenvs.serve.sessions import SessionStore

    plugin = (
        _GOOD + "PLUGIN = EnvPlugin('Sokoban-2box-v0', 'agentenvs.sokoban:SokobanEnv', "
        "kwargs={'num_boxes': 2}, splits=('train', 'test'))\n"
    )
    site = write_distribution(
        tmp_path / "site", "two-box-env", {"Sokoban-2box-v0": "two_box:PLUGIN"},
        {"two_box.py": plugin},
    )  # fmt: skip
    with on_path(site):
        assert make("Sokoban-2box-v0").unwrapped.variant["num_boxes"] == 2
        assert build_env("Sokoban-2box-v0").variant["num_boxes"] == 2
        assert build_env("Sokoban-2box-v0", num_boxes=3).variant["num_boxes"] == 3
        env, kwargs = SessionStore("Sokoban-2box-v0").make_env({"grid_style": "verl-agent"})
        assert env.variant == {**build_env("Sokoban-2box-v0").variant, "grid_style": "verl-agent"}
        env.reset(options={"task_id": "seed/5"})
        assert len(env.board.boxes) == 2
