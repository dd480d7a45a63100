from __future__ import annotations

import dataclasses

import pytest

from agentenvs.benchmarks.eval.cli import build_parser, default_out, key_value
from agentenvs.benchmarks.eval.settings import EvalSettings


def test_key_value_reads_json_else_a_string() -> None:
    assert key_value("dtype=bfloat16") == ("dtype", "bfloat16")
    assert key_value("concurrency=16") == ("concurrency", 16)
    assert key_value("stop=[1, 2]") == ("stop", [1, 2])


def test_a_bad_agent_option_names_the_flag(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["TextCraft-v0", "--agent", "expert", "--agent-opt", "novalue"])
    assert "--agent-opt: takes KEY=VALUE, got 'novalue'" in capsys.readouterr().err


def test_every_setting_has_an_option() -> None:
    args = vars(build_parser().parse_args(["TextCraft-v0", "--agent", "expert"]))
    derived = {"overrides", "protocol_settings", "agent_options"}
    fields = {f.name for f in dataclasses.fields(EvalSettings)} - derived
    assert fields <= set(args), fields - set(args)
    assert args["history"] == "default" and args["workers"] == "0" and args["k"] == 8


def test_default_out_is_a_safe_folder() -> None:
    assert str(default_out("Sokoban-v0", "openai:m@http://h:8/v1")) == (
        "results/eval/Sokoban-v0/openai_m_http_h_8_v1"
    )
