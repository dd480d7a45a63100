"""The operations of an http pool on one server: batches of steps and resets, cut starts, the
replay of an episode on a new server, and closing a slot's session.

:class:`ServerOperations` turns a pool item into requests on the server's native routes
(docs/serving.md) and their answers into the pool's results. A batch of steps (plain resets) is
one ``step_batch`` (``reset_batch``) request, its items in order; a cut start, and an episode
moved to another server, is one ``replay`` request (a task id and an action list). An answer
about the environment (an unknown task, a cut that is not reached, an exception of the
environment on the server) is the item's
:class:`~agentenvs.agents.envworkers.host.EnvFailure`, as in process; a dead server, a forgotten
session (``_ServerGone``) and a refusal that is not the environment's (``_Refused``) go to the
pool, which leaves that server or stops.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import Any

from agentenvs.agents.envworkers.host import CutStateError, EnvFailure, slot_of
from agentenvs.agents.envworkers.http_mirror import Mirrors
from agentenvs.agents.envworkers.http_sessions import ServerSessions
from agentenvs.agents.envworkers.http_transport import (
    GONE_STATUSES,
    AuthError,
    _EnvError,
    _Refused,
    _ServerGone,
    item_error,
    step_tuple,
)

__all__ = ["ServerOperations", "plain_reset"]


class ServerOperations:
    """A pool's items run on a server through ``sessions``; ``mirrors``' local environments
    judge a cut state reached there (their ``match``) and are closed with a slot's session."""

    def __init__(self, sessions: ServerSessions, mirrors: Mirrors) -> None:
        self.sessions = sessions
        self.mirrors = mirrors

    # ----- batches ---------------------------------------------------------------------------

    def step_batch(self, url: str, items: list[tuple]) -> list[Any]:
        """Every ``(slot, action)`` in one ``step_batch`` request; one result per item."""
        steps = [
            {"session": self.sessions.on(url, slot), "action": action} for slot, action in items
        ]
        answers = self.sessions.post(url, "step_batch", {"steps": steps}, len(items))["results"]
        return [
            step_tuple(a) if a["status"] == 200 else _item_failure(url, "step_batch", a)
            for a in answers
        ]

    def reset_batch(self, url: str, items: list[tuple]) -> list[Any]:
        """Every ``(slot, task id)`` in one ``reset_batch`` request (sessions made first where a
        slot has none on ``url``); one result per item."""
        resets = [
            {"session": self.sessions.on_or_new(url, slot), "task_id": task_id}
            for slot, task_id, *_ in items
        ]
        body = {"resets": resets}
        answers = self.sessions.post(url, "reset_batch", body, len(items))["results"]
        results: list[Any] = []
        for item, answer in zip(items, answers, strict=True):
            if answer["status"] == 200:
                results.append((answer["observation"], answer["info"]))
            elif answer["status"] in GONE_STATUSES:  # expired between episodes: a new session
                results.append(self.apply(url, "reset", item))
            else:
                results.append(_item_failure(url, "reset_batch", answer))
        return results

    # ----- one operation ---------------------------------------------------------------------

    def apply_one(self, url: str, op: str, item: tuple) -> list[Any]:
        return [self.apply(url, op, item)]

    def apply(self, url: str, op: str, item: tuple) -> Any:
        """Run one item; an environment error is its :class:`EnvFailure`."""
        try:
            if op == "replay":
                return self.replay(url, item[0])
            if op == "reset":
                return self._reset(url, *item)
            if op == "step":
                slot, action = item
                return step_tuple(self.sessions.call(url, slot, "step", {"action": action}, False))
            if op == "drop":
                return self._drop(item[0])
            raise ValueError(f"an http pool does not run {op!r} on its servers")
        except (_ServerGone, _Refused, AuthError):
            raise
        except _EnvError as exc:  # the server's answer about the environment (unknown task...)
            return EnvFailure(str(exc))
        except Exception as exc:  # the environment's, as in process
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return EnvFailure(detail)

    def replay(self, url: str, operations: list[tuple[str, tuple]]) -> list[Any]:
        """A slot's episode (its reset, then steps) on ``url``, in a new session; one result per
        operation. One ``replay`` request when it can run in one, else one request each."""
        op, item = operations[0]
        slot = slot_of(op, item)
        self.sessions.forget(slot)  # its session died with its old server
        if op != "reset" or any(o != "step" for o, _ in operations[1:]):
            return [self.apply(url, o, i) for o, i in operations]
        task_id = item[1]
        prefix = list(item[2]) if len(item) > 2 else []
        cut_observation = item[3] if len(item) > 3 else None
        actions = prefix + [i[1] for _, i in operations[1:]]
        body = {"task_id": task_id, "actions": actions}
        try:
            answer = self.sessions.call(url, slot, "replay", body, True, len(operations))
        except _EnvError:  # an operation fails: find which, one request each
            return [self.apply(url, o, i) for o, i in operations]
        steps = answer["steps"]
        if prefix:
            last = steps[len(prefix) - 1]
            reached = (last["observation"], last["info"])
            missed = cut_observation is not None and reached[0] != cut_observation
            if (missed and not self.mirrors.env(slot).match(cut_observation, reached[0])) or (
                last["terminated"] or last["truncated"]
            ):  # the cut start fails: the per-operation path gives its error
                return [self.apply(url, o, i) for o, i in operations]
        else:
            reached = (answer["reset"]["observation"], answer["reset"]["info"])
        return [reached, *(step_tuple(step) for step in steps[len(prefix) :])]

    def _reset(
        self,
        url: str,
        slot: int,
        task_id: str,
        prefix_actions: Sequence[str] = (),
        cut_observation: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        if not prefix_actions and cut_observation is None:
            body = self.sessions.call(url, slot, "reset", {"task_id": task_id})
            return body["observation"], body["info"]
        actions = list(prefix_actions)
        request = {"task_id": task_id, "actions": actions}
        body = self.sessions.call(url, slot, "replay", request, True, len(actions) + 1)
        steps = body["steps"]
        last = steps[-1] if steps else body["reset"]
        reached, info = last["observation"], last["info"]
        if cut_observation is not None and reached != cut_observation:
            if not self.mirrors.env(slot).match(cut_observation, reached):
                raise CutStateError(
                    f"replaying {len(prefix_actions)} prefix actions of {task_id} reaches "
                    f"{reached!r}, not the recorded cut observation {cut_observation!r}"
                )
        if steps and (last["terminated"] or last["truncated"]):
            raise CutStateError(
                f"the episode of {task_id} is over at the cut (after {len(prefix_actions)} "
                "prefix actions): nothing is left to play"
            )
        return reached, info

    def _drop(self, slot: int) -> None:
        """Close the slot's session (its next reset makes a new one) and forget its mirror."""
        self.mirrors.drop(slot)
        self.sessions.close_slot(slot)


def plain_reset(op: str, item: tuple) -> bool:
    """Whether ``item`` is a reset at the task's start (no cut state to replay)."""
    return op == "reset" and (len(item) == 2 or (not item[2] and item[3] is None))


def _item_failure(url: str, route: str, answer: dict[str, Any]) -> EnvFailure:
    """A batch item's error: the environment's failure (a 4xx about it, or its exception on the
    server, a 500); a lost session is a dead worker, as for a single request."""
    status = int(answer["status"])
    if status >= 500:
        message = answer.get("error", {}).get("message", "")
        return EnvFailure(f"{message} (on agentenvs server {url})")
    error = item_error(status, answer, route)
    if isinstance(error, _ServerGone):
        raise error
    return EnvFailure(str(error))
