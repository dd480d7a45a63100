"""The page's data and the one page that renders it, served or exported.

:func:`index` is everything the page needs to open (per run: its metadata, overview tables,
task list, episode summaries and training curves; per pair of runs: their comparison); the
episodes themselves are fetched one by one when shown. Served, the page asks the server for
both (:mod:`agentenvs.benchmarks.view.server`); exported (:func:`export_html`), the same index
is inlined as JSON and the episodes as chunks of :data:`EXPORT_CHUNK`, each gzipped and
base64-encoded, which the page unpacks with the browser's ``DecompressionStream`` when one of
their episodes is shown. The page is ``static/index.html`` with its script and style: served as
three files, exported as one with both inlined.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.view.report import compare, overview, run_k, task_rows
from agentenvs.benchmarks.view.runs import Run

__all__ = [
    "EXPORT_CHUNK",
    "INDEX_SCHEMA_VERSION",
    "dumps",
    "export_html",
    "index",
    "page_html",
    "static",
]

INDEX_SCHEMA_VERSION = 1
EXPORT_CHUNK = 64  # episodes per gzipped chunk: a task's k samples usually share one
_DATA_MARK = "<!--agentenvs:data-->"
_STYLE_LINK = '<link rel="stylesheet" href="viewer.css">'
_SCRIPT_TAG = '<script src="viewer.js"></script>'


def static(name: str) -> str:
    """A file of the page (``index.html``, ``viewer.js``, ``viewer.css``)."""
    return (resources.files("agentenvs.benchmarks.view") / "static" / name).read_text("utf-8")


def _run_entry(run: Run, position: int) -> dict[str, Any]:
    meta = {k: v for k, v in run.meta.items() if v is not None}
    k, _ = run_k(run)
    if k:
        meta["k"] = k
    return {
        "id": position,
        "name": run.name,
        "path": str(run.path),
        "kind": run.kind,
        "meta": meta,
        "notes": run.notes,
        "tables": overview(run),
        "tasks": task_rows(run),
        "episodes": [{k: v for k, v in e.items() if k != "error_message"} for e in run.episodes],
        "training": run.training,
    }


def index(runs: Sequence[Run]) -> dict[str, Any]:
    """The page's data (see the module docstring); comparisons of every pair, later run
    against earlier."""
    from agentenvs import __version__

    return {
        "schema_version": INDEX_SCHEMA_VERSION,
        "agentenvs": __version__,
        "runs": [_run_entry(run, i) for i, run in enumerate(runs)],
        "comparisons": [
            compare(runs[i], runs[j], i, j)
            for i in range(len(runs))
            for j in range(i + 1, len(runs))
        ],
    }


def dumps(value: Any) -> str:
    """Strict JSON, which the browser parses: a non-finite number (NaN, infinity) is null."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return dumps(_finite(value))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>``, no ``<!--``)."""
    return dumps(value).replace("<", "\\u003c")


def _chunks(run: Run, size: int) -> list[str]:
    out = []
    for start in range(0, len(run.episodes), size):
        records = [run.record(i) for i in range(start, min(start + size, len(run.episodes)))]
        raw = dumps(records).encode("utf-8")
        out.append(base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii"))
    return out


def page_html(data: dict[str, Any] | None = None, episodes: dict[str, Any] | None = None) -> str:
    """The page: as served (``data`` None: it fetches from the server), or self-contained with
    the index and the episode chunks inlined and its script and style in the file."""
    html = static("index.html")
    if data is None:
        return html
    blocks = (
        f'<script id="agentenvs-data" type="application/json">{_script_json(data)}</script>\n'
        f'<script id="agentenvs-episodes" type="application/json">{_script_json(episodes)}'
        "</script>"
    )
    script, style = static("viewer.js"), static("viewer.css")
    if "</script" in script.lower():
        raise AssertionError("viewer.js must not contain a closing script tag")
    html = html.replace(_STYLE_LINK, f"<style>\n{style}</style>")
    html = html.replace(_DATA_MARK, blocks)
    return html.replace(_SCRIPT_TAG, f"<script>\n{script}</script>")


def export_html(runs: Sequence[Run], out: str | Path, chunk: int = EXPORT_CHUNK) -> Path:
    """Write the self-contained page of ``runs`` to ``out``; returns its path."""
    out = Path(out)
    episodes = {"chunk": chunk, "runs": [_chunks(run, chunk) for run in runs]}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page_html(index(runs), episodes), encoding="utf-8")
    tmp.replace(out)
    return out
