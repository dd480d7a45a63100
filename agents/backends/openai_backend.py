"""The OpenAI-compatible backend: any ``/chat/completions`` server (``openai:<model>@<base url>``).

Works with vLLM's and SGLang's OpenAI servers and hosted models (e.g. the paper's teacher,
MiniMax-M2.1). Only the standard library is used (``urllib`` in a thread pool), so nothing
extra is installed.

* One request per conversation, at most ``concurrency`` in flight (default 8).
* Transient failures (connection refused or reset, timeouts, HTTP 408/409/425/429/5xx: a server
  restarting, overloaded or briefly down) are retried with exponential backoff (``backoff``
  seconds doubling up to ``max_backoff``; ``Retry-After`` is honoured) for as long as
  ``retry_window`` seconds (default 300) from the request's first failure, so an outage shorter
  than that loses no episode in flight: the generation call just waits. A longer one (or more
  than ``max_retries`` retries, when set) raises
  :class:`~agentenvs.agents.policy.BackendUnavailableError`; ``agentenvs eval`` then stops with the
  finished episodes on disk and prints the command that resumes the run.
* Bad credentials (401/403) raise :class:`BackendAuthError` and an unknown model (404, or an
  error whose code or message names the model) :class:`BackendModelError`, at once, with the
  server's message: every request would fail the same way.
* The API key is read from the environment variable named by ``api_key_env`` (default
  ``OPENAI_API_KEY``); no key sends no ``Authorization`` header (local servers).
* ``logprobs`` (default True) asks for the sampled tokens' log-probabilities. A server that
  ignores the request (``transformers serve`` does) or refuses the field (HTTP 400 naming it)
  gets one warning, the completions store None, and :meth:`OpenAIPolicy.run_metadata` (written
  to the run's ``run.json`` by ``agentenvs eval``) says so under ``logprobs``.
  ``token_ids=True`` also asks vLLM for token ids (its ``return_tokens_as_token_ids``
  extension, tokens come back as ``token_id:<n>``); off by default.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentenvs.agents.policy import (
    BackendError,
    BackendUnavailableError,
    Completion,
    Policy,
    SamplingParams,
    row_seed,
)

__all__ = ["BackendAuthError", "BackendModelError", "OpenAIPolicy"]

Message = dict[str, str]

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class BackendAuthError(BackendError):
    """The server refused the credentials (HTTP 401 or 403)."""


class BackendModelError(BackendError):
    """The server does not serve the requested model."""


class OpenAIPolicy(Policy):
    """Chat completions from an OpenAI-compatible server (see the module docstring)."""

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        spec: str = "",
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int | str = 8,
        max_retries: int | str | None = None,
        timeout: float | str = 600.0,
        backoff: float | str = 1.0,
        max_backoff: float | str = 30.0,
        retry_window: float | str = 300.0,
        logprobs: bool | str = True,
        token_ids: bool | str = False,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(spec or f"openai:{model}@{base_url}")
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = os.environ.get(api_key_env, "")
        self.api_key_env = api_key_env
        self.concurrency = int(concurrency)
        self.max_retries = None if max_retries in (None, "", "none") else int(max_retries)
        self.timeout = float(timeout)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.retry_window = float(retry_window)
        self.logprobs = _flag(logprobs)
        self.logprobs_status = "requested" if self.logprobs or _flag(token_ids) else "off"
        self.retried_seconds = 0.0  # time spent waiting out transient failures, all requests
        self._lock = threading.Lock()
        self.token_ids = _flag(token_ids)
        self.extra_body = dict(extra_body or {})
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="openai")

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: SamplingParams | None = None,
        *,
        envs: Sequence[Any] | None = None,
        keys: Sequence[str] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        sampling = sampling or SamplingParams()
        bodies = [
            self._body(c, sampling, row_seed(sampling, row, seeds))
            for row, c in enumerate(conversations)
        ]
        return list(self._pool.map(self._complete, bodies))

    def _body(
        self, conversation: Sequence[Message], sampling: SamplingParams, seed: int | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in conversation],
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
            "n": 1,
        }
        if seed is not None:
            body["seed"] = seed
        if (self.logprobs or self.token_ids) and self.logprobs_status != "refused":
            body["logprobs"] = True
        if self.token_ids:
            body["return_tokens_as_token_ids"] = True
        body.update(self.extra_body)
        return body

    def _complete(self, body: dict[str, Any]) -> Completion:
        try:
            data = self._post(body)
        except _LogprobsRefused as exc:
            self._logprobs_missing("refused", f"the server refused the logprobs field ({exc})")
            body = {
                k: v for k, v in body.items() if k not in ("logprobs", "return_tokens_as_token_ids")
            }
            data = self._post(body)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BackendError(
                f"{self.url}: unexpected response (no choices[0].message): {str(data)[:300]}"
            ) from exc
        token_ids, logprobs = _token_logprobs(choice.get("logprobs"))
        if body.get("logprobs") and logprobs is None:
            self._logprobs_missing("missing", "the server returned none (it ignores the field)")
        elif logprobs is not None and self.logprobs_status == "requested":
            self.logprobs_status = "returned"
        return Completion(
            text=text,
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=choice.get("finish_reason"),
        )

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last_error = ""
        first_failure: float | None = None
        attempt = 0
        while True:
            request = urllib.request.Request(self.url, data=payload, headers=headers, method="POST")
            retry_after: float | None = None
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    data = json.loads(response.read().decode("utf-8"))
                if first_failure is not None:
                    with self._lock:
                        self.retried_seconds += time.monotonic() - first_failure
                return data
            except urllib.error.HTTPError as exc:
                message = _error_message(exc)
                self._raise_fatal(exc.code, message)
                if exc.code == 400 and "logprob" in message.lower() and body.get("logprobs"):
                    raise _LogprobsRefused(f"HTTP 400: {message}") from exc
                if exc.code not in RETRY_STATUS:
                    raise BackendError(f"{self.url}: HTTP {exc.code}: {message}") from exc
                last_error = f"HTTP {exc.code}: {message}"
                retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            except (
                urllib.error.URLError,
                TimeoutError,
                ConnectionError,
                OSError,
                http.client.HTTPException,  # e.g. IncompleteRead: the server died mid-response
            ) as exc:
                last_error = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            except json.JSONDecodeError as exc:
                last_error = f"invalid JSON in the response: {exc}"
            now = time.monotonic()
            first_failure = now if first_failure is None else first_failure
            delay = retry_after if retry_after is not None else self.backoff * 2**attempt
            delay = min(delay, self.max_backoff) * (1 + 0.1 * random.random())
            attempt += 1
            out_of_tries = self.max_retries is not None and attempt > self.max_retries
            if out_of_tries or now + delay - first_failure > self.retry_window:
                raise BackendUnavailableError(
                    f"{self.url}: giving up after {attempt} attempts over "
                    f"{now - first_failure:.0f} s (retry window {self.retry_window:g} s, "
                    f"--agent-opt retry_window=SECONDS); last error: {last_error}"
                )
            time.sleep(delay)

    def _logprobs_missing(self, status: str, why: str) -> None:
        with self._lock:
            if self.logprobs_status in ("missing", "refused"):
                return
            self.logprobs_status = status
        warnings.warn(
            f"{self.url}: log-probabilities were requested but {why}; completions store "
            "logprobs=None (recorded in the run's metadata). Use a server that returns them "
            "(e.g. vLLM) where they are needed, or --agent-opt logprobs=false to stop asking.",
            RuntimeWarning,
            stacklevel=2,
        )

    def run_metadata(self) -> dict[str, Any]:
        """What the run should record about this backend: the server, whether log-probs came
        back (``requested``: nothing answered yet; ``returned``; ``missing``: the server ignored
        the request; ``refused``: it rejected the field; ``off``), and the seconds spent waiting
        out transient failures."""
        return {
            "backend": "openai",
            "url": self.url,
            "model": self.model,
            "logprobs": self.logprobs_status,
            "retried_seconds": round(self.retried_seconds, 3),
            "retry_window": self.retry_window,
        }

    def _raise_fatal(self, status: int, message: str) -> None:
        if status in (401, 403):
            where = f"${self.api_key_env} is {'set' if self.api_key else 'not set'}"
            raise BackendAuthError(
                f"{self.url} refused the credentials (HTTP {status}: {message}); {where}. "
                f"Export the right key in {self.api_key_env}, or pick another variable with "
                "--agent-opt api_key_env=NAME"
            )
        lowered = message.lower()
        if status == 404 or (
            status == 400 and "model" in lowered and ("not" in lowered or "exist" in lowered)
        ):
            raise BackendModelError(
                f"{self.url} does not serve model {self.model!r} (HTTP {status}: {message}); "
                "check the name before '@' in openai:<model>@<base url> "
                "(GET <base url>/models lists them)"
            )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class _LogprobsRefused(Exception):
    """The server rejected the ``logprobs`` field (HTTP 400 naming it): retry without it."""


def _flag(value: bool | str) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read().decode("utf-8", "replace")
    except Exception:
        return exc.reason if isinstance(exc.reason, str) else str(exc)
    try:
        data = json.loads(raw)
        error = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(error, dict):
            return str(error.get("message") or error)
        return str(error)
    except (json.JSONDecodeError, AttributeError):
        return raw[:300] or str(exc.reason)


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _token_logprobs(block: Any) -> tuple[list[int] | None, list[float] | None]:
    """(token ids, log-probs) from a choice's ``logprobs`` block (None where absent)."""
    if not isinstance(block, dict) or not isinstance(block.get("content"), list):
        return None, None
    logprobs = [float(item.get("logprob", 0.0)) for item in block["content"]]
    ids: list[int] | None = []
    for item in block["content"]:
        token = str(item.get("token", ""))
        if token.startswith("token_id:") and token[9:].isdigit():
            ids.append(int(token[9:]))  # type: ignore[union-attr]
        else:
            ids = None
            break
    return ids, logprobs
