"""benchmarks/speed/serve_scale.py on a tiny setting: every transport through one HAProxy address
runs, each level's figures are filled in, the report renders into a marked doc section (no timed
assertion: figures are reported, not asserted). Skips where HAProxy is not installed."""

from __future__ import annotations

import json

import pytest

from agentenvs.benchmarks.speed import serve_scale
from agentenvs.benchmarks.speed.serve_scale_clients import CLIENT_FD_MARGIN, client_processes
from agentenvs.benchmarks.speed.serve_scale_report import (
    DOC_END,
    DOC_START,
    doc_markers,
    largest_passing,
    write_doc,
)
from agentenvs.serve.proxy import haproxy_binary

pytestmark = pytest.mark.skipif(haproxy_binary() is None, reason="HAProxy is not installed")


def test_serve_scale_tiny(tmp_path) -> None:
    out = tmp_path / "scale.json"
    doc = tmp_path / "doc.md"
    doc.write_text(f"# x\n\n{DOC_START}\nold\n{DOC_END}\n\nafter\n")
    argv = ["--envs", "TextCraft-v0", "--levels", "6,10", "--think", "0.2", "--steps", "2"]
    argv += ["--batch", "4", "--ramp-rate", "50", "--drop-every", "3"]
    argv += ["--openenv-python", "", "--no-session-memory"]
    assert serve_scale.main([*argv, "--json", str(out), "--write-doc", str(doc)]) == 0
    report = json.loads(out.read_text())
    rows = report["results"]
    assert [(r["series"].split()[-1], r["sessions"]) for r in rows] == [
        (t, n) for t in ("native", "batch", "ws") for n in (6, 10)
    ]
    for r in rows:
        assert r["success"] == 1.0, r["errors"]
        assert 0 < r["p50_ms"] <= r["p99_ms"] and r["requests_per_s"] > 0
        assert 0 < r["p99_after_ramp_ms"] and r["client_processes"] == 1
        assert set(r["cpu_ms_per_request"]) == {"workers", "proxy", "client"}
    ws = [r for r in rows if r["series"].endswith("ws")]
    assert all(r["ws_left_open"] == 0 for r in ws)  # the dropped WebSocket freed its session
    assert largest_passing(rows, "agentenvs TextCraft-v0 batch") == 10
    text = doc.read_text()
    assert "old" not in text and text.endswith("\n\nafter\n")
    assert "| agentenvs TextCraft-v0 ws | 10 | 100.00% |" in text


def test_client_processes_keep_each_under_the_open_file_limit() -> None:
    margin = CLIENT_FD_MARGIN
    assert client_processes(16_384, 20_000) == 1
    assert client_processes(32_768, 20_000) == 2
    assert client_processes(20_000 - margin, 20_000) == 1
    assert client_processes(20_000 - margin + 1, 20_000) == 2
    assert client_processes(1, 100) == 1


def test_a_named_section_leaves_the_main_report_alone(tmp_path) -> None:
    start, end = doc_markers("beyond")
    doc = tmp_path / "doc.md"
    doc.write_text(f"{DOC_START}\nmain\n{DOC_END}\n{start}\nold\n{end}\n")
    write_doc(doc, "new", "beyond")
    assert doc.read_text() == f"{DOC_START}\nmain\n{DOC_END}\n{start}\nnew\n{end}\n"
    with pytest.raises(ValueError, match="serve-scale-other:start"):
        write_doc(doc, "x", "other")


def test_sessions_outlive_their_episodes(tmp_path) -> None:
    """A session that steps past TextCraft's 30 turns starts a new episode (a reset) instead of
    failing with episode_over, on each transport."""
    out = tmp_path / "scale.json"
    argv = ["--envs", "TextCraft-v0", "--levels", "4", "--think", "0.01", "--steps", "40"]
    argv += ["--batch", "2", "--openenv-python", "", "--no-session-memory"]
    assert serve_scale.main([*argv, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["series"].split()[-1] for r in rows] == ["native", "batch", "ws"]
    for r in rows:
        assert r["success"] == 1.0, r["errors"]
