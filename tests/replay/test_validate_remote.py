"""``replay validate --env-workers http://...``: cut-state queries replay-validated on real
``agentenvs serve`` servers (uvicorn on 127.0.0.1) give the rows the in-process run gives; a
dead server at start is an error naming it, one that dies mid-run costs nothing."""

from __future__ import annotations

import contextlib
import json

import pytest

pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agentenvs.agents.envworkers.pool import EnvWorkerError  # noqa: E402
from agentenvs.replay.io import QUERY_SCHEMA, write_rows  # noqa: E402
from agentenvs.replay.stages import run_validate  # noqa: E402
from agentenvs.replay.validate import validate_queries  # noqa: E402

from ..serve.conftest import free_port, live_server  # noqa: E402
from .test_validate import every_cut  # noqa: E402

TC = "TextCraft-v0"
TASKS = ["agentgym/421", "agentgym/140", "agentgym/7", "agentgym/12", "agentgym/30", "agentgym/55"]


@pytest.fixture(scope="module")
def queries(expert_trajectory) -> list:
    """Every cut of expert episodes, one with a prefix past the episode's end (an error row)."""
    import dataclasses

    out = []
    for task in TASKS:
        out += every_cut(expert_trajectory(TC, task))
    traj = expert_trajectory(TC, "agentgym/421")
    last = every_cut(traj)[-1]
    out.append(
        dataclasses.replace(
            last,
            prefix_turns=len(traj.steps) + 1,
            prefix_actions=traj.actions + ["inventory"],
            sample_index=1,
        )
    )
    return out


def _app():
    from agentenvs.serve import build_app

    return build_app(TC, "agentgym", max_sessions=16)


def _rows(pairs) -> list[str]:
    return [json.dumps({**q.to_row(), **r.to_row()}, sort_keys=True) for q, r in pairs]


def test_two_servers_give_the_in_process_rows(queries, tmp_path) -> None:
    local = _rows(validate_queries(queries))
    statuses = {json.loads(r)["status"] for r in local}
    assert {"validated", "error"} <= statuses  # the comparison covers an error row too
    with live_server(_app()) as one, live_server(_app()) as two:
        assert _rows(validate_queries(queries, env_workers=[one, two])) == local
        # the stage: the same file as in process
        path = tmp_path / "queries.jsonl"
        write_rows(path, QUERY_SCHEMA, (q.to_row() for q in queries))
        run_validate(path, tmp_path / "here.jsonl", progress=False)
        run_validate(path, tmp_path / "there.jsonl", progress=False, env_workers=f"{one},{two}")
    assert (tmp_path / "here.jsonl").read_text() == (tmp_path / "there.jsonl").read_text()


def test_a_dead_server_at_start_is_an_error_naming_it(queries) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with live_server(_app()) as alive:
        with pytest.raises(EnvWorkerError, match=f"no agentenvs server answers at {dead}") as e:
            list(validate_queries(queries, env_workers=[alive, dead]))
    assert f"agentenvs serve {TC}" in str(e.value)  # how to start one


def test_a_server_that_dies_mid_run_costs_its_trajectories_a_retry(queries) -> None:
    local = _rows(validate_queries(queries))
    with live_server(_app()) as one:
        stack = contextlib.ExitStack()
        two = stack.enter_context(live_server(_app()))
        results = validate_queries(queries, env_workers=[one, two])
        got = [next(results)]
        stack.close()  # the second server stops; trajectories still to come start on it
        got += list(results)
    assert _rows(got) == local
    stack = contextlib.ExitStack()
    only = stack.enter_context(live_server(_app()))
    results = validate_queries(queries, env_workers=[only])
    next(results)
    stack.close()  # the only server stops: a clear error, not error rows
    with pytest.raises(EnvWorkerError, match=f"no agentenvs server is left.*{only}"):
        list(results)


def test_the_cli_names_a_dead_server_and_how_to_start_one(queries, tmp_path, capsys) -> None:
    from agentenvs.replay.cli import validate_main

    path = tmp_path / "queries.jsonl"
    write_rows(path, QUERY_SCHEMA, (q.to_row() for q in queries[:3]))
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SystemExit) as exit_:
        validate_main([str(path), "-o", str(tmp_path / "out.jsonl"), "--env-workers", dead])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"no agentenvs server answers at {dead}" in err and "agentenvs serve" in err
