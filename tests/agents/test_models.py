"""One model argument everywhere: embedded, a local directory or a hub id; one-line errors."""

from __future__ import annotations

import pytest

from agentenvs.agents.models import ModelNotFoundError, resolve_model


def test_a_local_directory_is_returned(tiny_model_dir) -> None:
    assert resolve_model(str(tiny_model_dir)) == str(tiny_model_dir)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("", "is required"),
        ("./runs/sft/modle", "no such directory"),
        ("no such thing", "not a hub id"),
    ],
)
def test_bad_arguments_are_one_line_errors(name, expected, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model(name)
    message = str(info.value)
    assert expected in message and "\n" not in message
    assert "embedded" in message and "config.json" in message  # what is accepted


def test_a_mistyped_path_under_a_local_directory_is_not_taken_for_a_hub_id(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(ModelNotFoundError, match="no such directory"):
        resolve_model("runs/sft")


def test_a_directory_without_config_says_so(tmp_path) -> None:
    with pytest.raises(ModelNotFoundError, match="has no config.json"):
        resolve_model(str(tmp_path))


def test_an_uncached_hub_id_offline_is_refused_at_once(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="not in the local hub cache"):
        resolve_model("nobody-here/no-such-model-xyz")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert resolve_model("nobody-here/no-such-model-xyz") == "nobody-here/no-such-model-xyz"


def test_hf_spec_and_cli_errors_are_one_line(tmp_path, capsys, monkeypatch) -> None:
    from agentenvs.cli import main as cli_main

    monkeypatch.chdir(tmp_path)
    code = cli_main(
        ["eval", "TextCraft-v0", "--agent", "hf:./missing", "--limit", "1", "-k", "1"]
        + ["--no-progress", "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "no such directory" in err and len(err.splitlines()) == 1
    for argv in (
        ["replay", "sidecar", str(tmp_path / "v.jsonl"), "-o", "x", "--model", "./missing"],
        ["train", "sft", "--model", "./missing", "--data", "x.jsonl", "--out", "o"],
        ["train", "rl", "--model", "./missing", "--out", "o"],
    ):
        with pytest.raises(SystemExit) if argv[0] == "replay" else _nothing():
            code = cli_main(argv)
            assert code == 2
        err = capsys.readouterr().err.strip()
        assert "no such directory" in err and "Traceback" not in err, argv
        assert len(err.splitlines()) == 1, err


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False
