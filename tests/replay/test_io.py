"""Stage files: schema tags, versions, and clear errors for foreign or corrupt files."""

from __future__ import annotations

import json

import pytest

from agentenvs.replay.io import (
    QUERY_SCHEMA,
    SCHEMA_VERSIONS,
    VALIDATED_SCHEMA,
    StageFileError,
    count_rows,
    read_rows,
    write_rows,
)


def test_round_trip_tags_every_row(tmp_path) -> None:
    path = tmp_path / "q.jsonl"
    rows = [{"a": 1}, {"a": 2, "schema": "old", "schema_version": 0}]
    assert write_rows(path, QUERY_SCHEMA, rows) == 2
    first = json.loads(path.read_text().splitlines()[0])
    assert list(first)[:2] == ["schema", "schema_version"]
    back = list(read_rows(path, QUERY_SCHEMA))
    assert [r["a"] for r in back] == [1, 2]
    assert all(r["schema_version"] == SCHEMA_VERSIONS[QUERY_SCHEMA] for r in back)
    assert [r["a"] for r in read_rows(path, QUERY_SCHEMA, limit=1)] == [1]
    assert count_rows(path) == 2
    assert not (tmp_path / "q.jsonl.tmp").exists()


def test_foreign_stale_and_corrupt_files_are_clear_errors(tmp_path) -> None:
    path = tmp_path / "q.jsonl"
    write_rows(path, QUERY_SCHEMA, [{"a": 1}])
    with pytest.raises(StageFileError, match="expected a 'replay.validated' row"):
        list(read_rows(path, VALIDATED_SCHEMA))
    path.write_text('{"schema": "replay.query", "schema_version": 99}\n')
    with pytest.raises(StageFileError, match="version 99"):
        list(read_rows(path, QUERY_SCHEMA))
    path.write_text('{"schema": "replay.query", "schema_version": 1}\n{"trunc')
    with pytest.raises(StageFileError, match=r"q.jsonl:2: not JSON"):
        list(read_rows(path, QUERY_SCHEMA))
    path.write_text("[1, 2]\n")
    with pytest.raises(StageFileError, match="JSON object"):
        list(read_rows(path, QUERY_SCHEMA))
    with pytest.raises(StageFileError, match="unknown replay schema"):
        write_rows(path, "replay.nope", [])
    with pytest.raises(FileNotFoundError):
        list(read_rows(tmp_path / "missing.jsonl", QUERY_SCHEMA))
