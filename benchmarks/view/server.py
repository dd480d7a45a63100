"""The server of ``agentenvs view``: the page and its data over HTTP (FastAPI).

Routes (thin; the work is in :mod:`agentenvs.benchmarks.view.page` and the runs):

* ``GET /``, ``/viewer.js``, ``/viewer.css``: the page;
* ``GET /api/index``: :func:`agentenvs.benchmarks.view.page.index` of the runs, computed once;
* ``GET /api/runs/{run}/episodes/{episode}``: one episode's record, read from its file when
  asked.

Every error is ``{"error": {"type", "message"}}`` with its status (404 for an unknown run or
episode, 422 for a path that is not a number).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentenvs.benchmarks.view.page import dumps, index, page_html, static
from agentenvs.benchmarks.view.runs import Run

__all__ = ["create_app"]


def _json(payload: Any, status: int = 200) -> Response:
    return Response(dumps(payload), status_code=status, media_type="application/json")


def _error(status: int, type_: str, message: str) -> Response:
    return _json({"error": {"type": type_, "message": message}}, status)


def create_app(runs: Sequence[Run]) -> FastAPI:
    """The app serving ``runs`` (see the module docstring)."""
    app = FastAPI(title="agentenvs view", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(GZipMiddleware, minimum_size=4096)
    index_body = _json(index(runs)).body
    files = {
        "viewer.js": (static("viewer.js"), "text/javascript"),
        "viewer.css": (static("viewer.css"), "text/css"),
    }

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _error(exc.status_code, "not_found" if exc.status_code == 404 else "http",
                      str(exc.detail))  # fmt: skip

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return _error(422, "invalid_request", f"{where}: {first.get('msg', 'invalid')}")

    @app.get("/")
    def page() -> Response:
        return Response(page_html(), media_type="text/html")

    @app.get("/viewer.js")
    @app.get("/viewer.css")
    def asset(request: Request) -> Response:
        text, media = files[request.url.path.lstrip("/")]
        return Response(text, media_type=media)

    @app.get("/api/index")
    def api_index() -> Response:
        return Response(index_body, media_type="application/json")

    @app.get("/api/runs/{run}/episodes/{episode}")
    def api_episode(run: int = Path(ge=0), episode: int = Path(ge=0)) -> Response:
        if run >= len(runs):
            return _error(404, "not_found", f"no run {run}: the runs are 0..{len(runs) - 1}")
        try:
            return _json(runs[run].record(episode))
        except IndexError as exc:
            return _error(404, "not_found", str(exc))

    return app
