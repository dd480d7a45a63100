"""verifiers v1: our environments loaded the way verifiers loads an environment package (its
taskset id, ``agentenvs-verifiers``) and evaluated by verifiers' own ``vf-eval`` command: its
harness (the built-in chat program) asks an OpenAI-compatible endpoint on 127.0.0.1 for each
reply, and the endpoint here answers with the expert's replies (played beforehand by our own
rollouts under the same protocol). 3 tasks of each environment; every one is won, with our
actions, rewards and observations.

verifiers pins ``openai<3`` and ``mcp==2.0.0``, which the ``[all]`` install does not hold, so
these tests run in a venv of their own (``make test-verifiers``) and skip elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

if os.environ.get("AGENTENVS_REQUIRE_VERIFIERS") != "1":
    pytest.importorskip("verifiers.v1", reason="verifiers is tested in its own venv")
    pytest.importorskip("agentenvs_verifiers", reason="the environment package is not installed")

ENV_IDS = ("TextCraft-v0", "BabyAI-Text-v0", "ALFWorld-v0", "WebShop-v0", "Sokoban-v0")
TASKS = 3  # expert episodes per environment
TASKSET_ID = "agentenvs-verifiers"
MODEL = "agentenvs-expert"


class ExpertEndpoint:
    """An OpenAI-compatible chat endpoint (``/v1/chat/completions``, plain or streamed) that
    replies with the expert's next reply of the conversation it is sent: the conversation's
    first user turn names the episode, its assistant turns so far the reply's index."""

    def __init__(self) -> None:
        self.replies: dict[str, list[str]] = {}
        self.requests = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests += 1
                reply = endpoint.reply(body.get("messages") or [])
                if reply is None:
                    self._send(400, "application/json", b'{"error": "unknown conversation"}')
                elif body.get("stream"):
                    self._send(200, "text/event-stream", _sse(reply, body))
                else:
                    self._send(200, "application/json", json.dumps(_completion(reply)).encode())

            def _send(self, code: int, kind: str, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reply(self, messages: list[dict]) -> str | None:
        users = [_text(m) for m in messages if m.get("role") == "user"]
        turn = sum(m.get("role") == "assistant" for m in messages)
        replies = self.replies.get(users[0]) if users else None
        return replies[turn] if replies is not None and turn < len(replies) else None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _completion(text: str) -> dict:
    return {
        "id": "chatcmpl-expert",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _sse(text: str, body: dict) -> bytes:
    head = {"id": "chatcmpl-expert", "object": "chat.completion.chunk", "created": 0}
    head["model"] = MODEL
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        chunks.append({**head, "choices": [], "usage": usage})
    events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return "".join(events).encode()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[ExpertEndpoint]:
    served = ExpertEndpoint()
    yield served
    served.close()


def _expert_episodes(env_id: str) -> list:
    """The expert's episodes of the taskset's first tasks, by our rollouts, under the
    protocol the taskset plays (its default)."""
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts
    from agentenvs.integrations.verifiers.environment import (
        AgentenvsTaskset,
        AgentenvsTasksetConfig,
    )

    tasks = list(AgentenvsTaskset(AgentenvsTasksetConfig(id=TASKSET_ID, env=env_id)).load())
    infos = [t.data.info for t in tasks[:TASKS]]
    config = RolloutConfig(protocol=infos[0]["protocol"])
    plan = plan_episodes([i["task_id"] for i in infos], 1)
    trajs = {t.task_id: t for t in run_rollouts(make_policy("expert"), env_id, plan, config)}
    return [trajs[i["task_id"]] for i in infos]


def _vf_eval(env_id: str, url: str, out: Path) -> list[dict]:
    """``vf-eval`` of the taskset's first tasks against ``url``; its traces."""
    vf_eval = shutil.which("vf-eval", path=str(Path(sys.executable).parent)) or "vf-eval"
    command = [vf_eval, TASKSET_ID, "--env.taskset.env", env_id, "-n", str(TASKS)]
    command += ["--model", MODEL, "--client.base-url", url, "--client.api-key-var", "EXPERT_KEY"]
    command += ["--no-push", "--no-rich", "-o", str(out), "--run.dir", env_id]
    env = {**os.environ, "EXPERT_KEY": "unused", "VF_DISABLE_TELEMETRY": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (out / env_id / "traces.jsonl").read_text().splitlines()
    episodes = [json.loads(line) for line in lines if line.strip()]
    for episode in episodes:
        assert episode["ok"] and not episode["errors"], episode["errors"]
    return [trace for episode in episodes for trace in episode["traces"]]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_vf_eval_plays_the_expert_to_wins(env_id, endpoint, tmp_path):
    expected = _expert_episodes(env_id)
    for traj in expected:
        assert traj.won and traj.messages[-2]["role"] == "assistant"
        first_user = next(m["content"] for m in traj.messages if m["role"] == "user")
        endpoint.replies[first_user] = [s.completion for s in traj.steps]
    traces = _vf_eval(env_id, endpoint.url, tmp_path)
    assert len(traces) == TASKS
    by_task = {t.task_id: t for t in expected}
    for trace in traces:
        ours = trace["info"]["agentenvs"]
        traj = by_task[ours["task_id"]]
        assert ours["won"] is True and ours["turns"] == traj.turns
        assert ours["actions"] == traj.actions
        assert ours["rewards"] == pytest.approx([s.reward for s in traj.steps])
        assert trace["rewards"]["reward"]["score"] == pytest.approx(traj.total_reward)
        assert trace["rewards"]["won"]["score"] == 1.0
        # what the model was sent and replied: our conversation, up to the last observation
        seen = [(n["message"]["role"], _text(n["message"])) for n in trace["nodes"]]
        assert seen == [(m["role"], m["content"]) for m in traj.messages[:-1]]
