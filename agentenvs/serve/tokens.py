"""Snapshot tokens: an episode's state as an opaque string a client keeps and sends back.

A token is URL-safe base64 of JSON::

    {"format": 1, "env_id", "version", "env_kwargs", "variant", "task_id", "actions", "turn",
     "state": base64 of the pickled Snapshot, "mac": HMAC-SHA256 of all the above}

Restoring never unpickles bytes a client could have forged: ``state`` is used only when ``mac``
verifies under this server's key (``--snapshot-key`` / ``$AGENTENVS_SERVE_KEY``; random per
server when unset, shared by its workers). Otherwise, a token from another server, or a server
restarted with a new random key, restores by replaying ``actions`` from ``task_id`` (the
environments are deterministic by contract) and checking the replay reaches ``turn``. So a token
restores on any server of the same agentenvs version and environment variant either way; the key
only makes the restore fast.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from typing import Any

from agentenvs.core import Snapshot
from agentenvs.serve.errors import ServeError

__all__ = ["TOKEN_FORMAT", "TokenContent", "make_token", "read_token", "server_key"]

TOKEN_FORMAT = 1
KEY_ENV = "AGENTENVS_SERVE_KEY"
MAX_TOKEN_ACTIONS = 100_000


def server_key(key: str | bytes | None = None) -> bytes:
    """The HMAC key: ``key``, else ``$AGENTENVS_SERVE_KEY``, else 32 random bytes."""
    if key is None:
        key = os.environ.get(KEY_ENV) or None
    if key is None:
        return secrets.token_bytes(32)
    return key.encode() if isinstance(key, str) else bytes(key)


@dataclass(frozen=True)
class TokenContent:
    """A decoded token; ``snapshot`` is set only when its MAC verified under this server's key."""

    env_id: str
    version: str
    env_kwargs: dict[str, Any]
    variant: dict[str, Any]
    task_id: str
    actions: list[str]
    turn: int
    snapshot: Snapshot | None


def _mac(key: bytes, body: dict[str, Any]) -> str:
    message = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def make_token(
    key: bytes,
    *,
    version: str,
    env_kwargs: dict[str, Any],
    variant: dict[str, Any],
    actions: list[str],
    snapshot: Snapshot,
) -> str:
    body = {
        "format": TOKEN_FORMAT,
        "env_id": snapshot.env_id,
        "version": version,
        "env_kwargs": env_kwargs,
        "variant": variant,
        "task_id": snapshot.task_id,
        "actions": list(actions),
        "turn": snapshot.turn,
        "state": base64.b64encode(snapshot.to_bytes()).decode("ascii"),
    }
    body["mac"] = _mac(key, body)
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _bad(reason: str) -> ServeError:
    return ServeError(422, "bad_snapshot", f"not a snapshot token of agentenvs serve: {reason}")


def read_token(token: str, key: bytes) -> TokenContent:
    """Decode and check a token (422 when it is not one of ours)."""
    try:
        body = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (binascii.Error, ValueError, UnicodeError) as exc:
        raise _bad(f"{type(exc).__name__}: {exc}") from None
    if not isinstance(body, dict):
        raise _bad("its JSON is not an object")
    if body.get("format") != TOKEN_FORMAT:
        raise _bad(f"format {body.get('format')!r}, this server reads {TOKEN_FORMAT}")
    types = {
        "env_id": str,
        "version": str,
        "env_kwargs": dict,
        "variant": dict,
        "task_id": str,
        "actions": list,
        "turn": int,
        "state": str,
        "mac": str,
    }
    for name, type_ in types.items():
        if not isinstance(body.get(name), type_):
            raise _bad(f"field {name!r} missing or not a {type_.__name__}")
    actions = body["actions"]
    if len(actions) > MAX_TOKEN_ACTIONS or not all(isinstance(a, str) for a in actions):
        raise _bad(f"'actions' must be at most {MAX_TOKEN_ACTIONS} strings")
    mac = body.pop("mac")
    snapshot = None
    if hmac.compare_digest(mac, _mac(key, body)):
        snapshot = Snapshot.from_bytes(base64.b64decode(body["state"]))
    return TokenContent(
        env_id=body["env_id"],
        version=body["version"],
        env_kwargs=body["env_kwargs"],
        variant=body["variant"],
        task_id=body["task_id"],
        actions=actions,
        turn=body["turn"],
        snapshot=snapshot,
    )
