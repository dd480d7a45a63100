"""ALFWorld-v0 (with its fast path) says exactly what the unmodified engine says.

The original is textworld's ``PddlEnv`` in alfworld's ``AlfredDemangler(shuffle=False)`` and
``AlfredInfos``, run in processes of its own that never import agentenvs
(``benchmarks/speed/alfworld_original.py``). On every ``test`` game and a sample of ``train``
games it plays two episodes: the game's stored walkthrough (what the expert plays from the start:
ends won) and a random walk (admissible commands drawn with a seeded generator, one in six an
invalid one). ALFWorld-v0 then plays the same commands, and every observation, admissible list,
reward and ``won`` must be equal, after the reset and after every command. A sample of test
games does the same under ``game_version="agentgym"`` (the original loads the same rebuilt
game JSON).

About 18.5 CPU-minutes (the unmodified engine's 16 of them, in two processes beside this
one): about 10 minutes on 2 idle cores.
"""

from __future__ import annotations

import json
import queue
import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("alfworld", reason="ALFWorld-v0 needs the alfworld extra (make install)")
pytest.importorskip("textworld")

from agentenvs.alfworld import ALFWorldEnv, data, versions  # noqa: E402
from agentenvs.alfworld.observation import first_observation  # noqa: E402
from agentenvs.benchmarks.speed import alfworld_original  # noqa: E402

WORKERS = 2  # original-engine processes (the machine's 2 cores, with this one replaying)
RANDOM_STEPS = 15
JUNK_ONE_IN = 6
TRAIN_EVERY = 120  # every 120th training game: 30 of 3,553
AGENTGYM_EVERY = 20  # every 20th test game again under game_version="agentgym": 10 of 200


def _jobs() -> list[dict[str, Any]]:
    env = ALFWorldEnv()
    chosen = [("alfworld-0.4", t) for t in env.task_ids("test")]
    chosen += [("alfworld-0.4", t) for t in env.task_ids("train")[::TRAIN_EVERY]]
    chosen += [("agentgym", t) for t in env.task_ids("test")[::AGENTGYM_EVERY]]
    jobs = []
    for i, (version, task_id) in enumerate(chosen):
        path = str(data.resolve_game_file(env.game(task_id)))
        game: Any = path
        if version == "agentgym":
            with open(path, encoding="utf-8") as f:
                game = versions.to_agentgym(json.load(f))
        episodes = [
            {"walkthrough": True},
            {"random": {"seed": i, "steps": RANDOM_STEPS, "junk": JUNK_ONE_IN}},
        ]
        jobs.append(
            {"id": i, "version": version, "task_id": task_id, "game": game, "episodes": episodes}
        )
    env.close()
    return jobs


def _original_answers(jobs: list[dict[str, Any]]) -> Iterator[tuple[dict, dict]]:
    """(job, the original's answer) as the worker processes finish them."""
    answers: queue.Queue = queue.Queue()
    procs = [alfworld_original.launch() for _ in range(WORKERS)]

    def feed(proc: Any, share: list[dict]) -> None:
        for job in share:
            proc.stdin.write(json.dumps({k: job[k] for k in ("id", "game", "episodes")}) + "\n")
        proc.stdin.close()

    def read(proc: Any) -> None:
        for line in proc.stdout:
            answers.put(json.loads(line))
        answers.put({"eof": True})

    threads = []
    for k, proc in enumerate(procs):
        threads.append(threading.Thread(target=feed, args=(proc, jobs[k::WORKERS]), daemon=True))
        threads.append(threading.Thread(target=read, args=(proc,), daemon=True))
    for thread in threads:
        thread.start()
    by_id = {job["id"]: job for job in jobs}
    ended = 0
    try:
        while ended < WORKERS:
            answer = answers.get(timeout=900)
            if "eof" in answer:
                ended += 1
            elif answer.get("done"):
                assert answer["agentenvs_imported"] is False
            else:
                yield by_id[answer["id"]], answer
        codes = [proc.wait(timeout=60) for proc in procs]
        assert codes == [0] * WORKERS, codes
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _check_episode(env: ALFWorldEnv, job: dict, episode: dict) -> tuple[int, bool]:
    """Replay one of the original's episodes here; returns (commands compared, won)."""
    where = f"{job['version']} {job['task_id']}"
    trace = episode["trace"]
    obs, info = env.reset(options={"task_id": job["task_id"]})
    feedback, admissible, _, won = trace[0]
    assert obs == first_observation(feedback), where
    assert (info["admissible_actions"], info["won"]) == (admissible, won), where
    for n, (action, row) in enumerate(zip(episode["actions"], trace[1:], strict=True), 1):
        feedback, admissible, score, won = row
        obs, reward, terminated, _, info = env.step(action)
        at = f"{where} command {n} {action!r}"
        assert obs == env.version.process_ob(feedback), at
        assert info["admissible_actions"] == admissible, at
        assert (reward, info["won"], terminated) == (score, won, won), at
    return len(episode["actions"]), bool(trace[-1][3])


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_same_text_as_the_unmodified_engine():
    jobs = _jobs()
    envs = {v: ALFWorldEnv(max_turns=10**6, game_version=v) for v in versions.GAME_VERSIONS}
    games = commands = 0
    for job, answer in _original_answers(jobs):
        walkthrough, walk = answer["episodes"]
        n, won = _check_episode(envs[job["version"]], job, walkthrough)
        assert won, f"the walkthrough of {job['task_id']} does not win"
        commands += n + _check_episode(envs[job["version"]], job, walk)[0]
        games += 1
    for env in envs.values():
        env.close()
    assert games == len(jobs)
    assert commands > 20 * len(jobs)  # both episodes played through


def test_the_original_runs_apart_and_says_the_same_on_one_game():
    """The same check on one game and a short walk (the quick version of the test above)."""
    env = ALFWorldEnv()
    task_id = env.task_ids("test")[0]
    path = str(data.resolve_game_file(env.game(task_id)))
    rng = random.Random(0)
    job = {
        "id": 0,
        "version": "alfworld-0.4",
        "task_id": task_id,
        "game": path,
        "episodes": [
            {"walkthrough": True},
            {"random": {"seed": rng.randrange(99), "steps": 6, "junk": 3}},
        ],
    }
    answers = list(_original_answers([job]))
    assert len(answers) == 1
    for episode in answers[0][1]["episodes"]:
        _check_episode(env, job, episode)
    env.close()
