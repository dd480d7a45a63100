"""fast-downward's planner library shared by the sessions of a game: one loaded task, a state each.

textworld's ``PddlEnv`` loads a private copy of fast-downward's shared library per environment
(``fast_downward.load_lib`` copies ``libdownward.so`` to a temporary file and ``dlopen``\\ s it,
because the library keeps its task and current state in globals), and ``PddlState`` loads the
game's task into it (``load_sas``) on every load and reset. Measured, that copy (its mapped code
and relocations, about 1 MB) and the task it builds (the task, its successor generator and state
registry) were most of an ALFWorld session's memory, and a copy is never unloaded (``dlclose`` of
one crashed a later ``dlopen``).

Here every session gets a :class:`SessionPlanner` in place of the library (inside engine calls
only, :func:`agentenvs.alfworld.fastpath.installed` replaces ``fast_downward.load_lib``). It
stands for the library with the calls textworld makes, and holds only the session's state id in
the library's state registry:

* ``load_sas(task)`` binds the session to the :class:`_SharedTask` of that task (its text, or a
  :class:`TaskRef` naming it: the fast path keeps the text compressed), loading it
  into a library copy only when no copy holds it (a copy whose sessions are all gone is reused
  for the next task), and puts the session at the task's initial state;
* every other call first sets the library's current state to the session's (``set_state_id``,
  the library's own exported function), makes the call, and records the state the call left
  (``get_state_id``): the library computes applicable operators, successors, goal tests, state
  read-outs and plans from its current state alone, and its registry stores each state once,
  whatever session reached it, so each session sees exactly what a library of its own shows;
* ``load_sas_replan`` (the planner's task text, read by ``replan``) is kept per session and
  handed to the library before the session's ``replan`` if another text was loaded since;
* ``cleanup`` unbinds the session.

Library calls of a process take turns (:data:`LOCK`; engine calls already hold the engine lock).
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections.abc import Callable
from typing import Any

__all__ = ["LOCK", "SessionPlanner", "TaskRef", "library_copies", "session_library"]

LOCK = threading.RLock()


def _digest(task: bytes) -> bytes:
    """Names a task text (the text itself is about 1 MB; the library keeps a copy)."""
    return hashlib.sha256(task).digest()


class TaskRef(bytes):
    """What ``load_sas`` may be given in place of a task text (empty bytes): its digest, and its
    text kept compressed, decompressed only when a library copy has to load it."""

    key: bytes
    _packed: bytes

    @classmethod
    def of(cls, text: bytes) -> TaskRef:
        ref = cls()
        ref.key = _digest(text)
        ref._packed = zlib.compress(text, 1)
        return ref

    def text(self) -> bytes:
        return zlib.decompress(self._packed)


def _named(task: bytes) -> tuple[bytes, Callable[[], bytes]]:
    """``(digest, text getter)`` of a task given as its text or as a :class:`TaskRef`."""
    if isinstance(task, TaskRef):
        return task.key, task.text
    return _digest(task), lambda: task


class _SharedTask:
    """One library copy with one task loaded, and how many sessions are bound to it."""

    def __init__(self, lib: Any, key: bytes, text: Callable[[], bytes]) -> None:
        self.lib = lib
        self.key = b""
        self.sessions = 0
        self.initial_id = 0
        self.replan_text: bytes | None = None  # what load_sas_replan last gave this copy
        self.load(key, text)

    def load(self, key: bytes, text: Callable[[], bytes]) -> None:
        self.lib.load_sas(text())  # deletes the copy's previous task and registry
        self.key = key
        self.initial_id = int(self.lib.get_state_id())
        self.replan_text = None


class _Pool:
    """The process's library copies: one per task with sessions bound, idle ones kept for reuse."""

    def __init__(self, load_lib: Callable[[], Any]) -> None:
        self._load_lib = load_lib
        self._by_task: dict[bytes, _SharedTask] = {}  # bound or idle, by task digest
        self._idle: list[_SharedTask] = []  # no session bound, least recently released first

    def acquire(self, key: bytes, text: Callable[[], bytes]) -> _SharedTask:
        """The copy holding the task of digest ``key`` (loading ``text()`` into a copy if none
        does), one more session bound to it."""
        shared = self._by_task.get(key)
        if shared is None:
            if self._idle:
                shared = self._idle.pop(0)
                del self._by_task[shared.key]
                shared.load(key, text)
            else:
                shared = _SharedTask(self._load_lib(), key, text)
            self._by_task[key] = shared
        elif shared.sessions == 0:
            self._idle.remove(shared)
        shared.sessions += 1
        return shared

    def release(self, shared: _SharedTask) -> None:
        shared.sessions -= 1
        if shared.sessions == 0:
            self._idle.append(shared)

    def __len__(self) -> int:
        return len(self._by_task)


_POOL: list[_Pool] = []  # the process's pool, made on the first session


def _pool(load_lib: Callable[[], Any]) -> _Pool:
    if not _POOL:
        _POOL.append(_Pool(load_lib))
    return _POOL[0]


def library_copies() -> int:
    """How many copies of the planner library this process has loaded (bound or idle)."""
    return len(_POOL[0]) if _POOL else 0


class SessionPlanner:
    """What one session's ``PddlEnv`` and ``PddlState`` see as their planner library."""

    def __init__(self, pool: _Pool) -> None:
        self._pool = pool
        self._shared: _SharedTask | None = None
        self._state_id = -1
        self._replan: bytes | None = None

    def load_sas(self, task: bytes) -> bool:
        with LOCK:
            old = self._shared
            key, text = _named(task)
            if old is None or old.key != key:
                self._shared = self._pool.acquire(key, text)
                if old is not None:
                    self._pool.release(old)
            self._state_id = self._shared.initial_id
            self._replan = None
        return True

    def load_sas_replan(self, text: bytes) -> bool:
        self._replan = bytes(text)
        return True

    def replan(self, verbose: bool = False) -> bool:
        with LOCK:
            shared = self._bound()
            if self._replan is not None and shared.replan_text != self._replan:
                shared.lib.load_sas_replan(self._replan)
                shared.replan_text = self._replan
            return self._call("replan", (verbose,))

    def cleanup(self) -> None:
        with LOCK:
            if self._shared is not None:
                self._pool.release(self._shared)
            self._shared = None
            self._state_id = -1
            self._replan = None

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args: self._call(name, args)

    def _call(self, name: str, args: tuple) -> Any:
        with LOCK:
            lib = self._bound().lib
            lib.set_state_id(self._state_id)
            result = getattr(lib, name)(*args)
            self._state_id = int(lib.get_state_id())
            return result

    def _bound(self) -> _SharedTask:
        if self._shared is None:
            raise RuntimeError("the planner library was called before load_sas (or after cleanup)")
        return self._shared

    def __del__(self) -> None:  # an environment dropped without close() frees its binding
        try:
            self.cleanup()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def session_library(load_lib: Callable[[], Any]) -> Callable[[], SessionPlanner]:
    """A replacement for ``fast_downward.load_lib`` whose libraries are :class:`SessionPlanner`\\ s
    of the process's pool (``load_lib`` loads a real copy when the pool needs one)."""
    return lambda: SessionPlanner(_pool(load_lib))
