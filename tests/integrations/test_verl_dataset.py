"""verl: the dataset command writes parquet that verl's own RLHFDataset reads, and the rows it
yields are what our agent loop needs."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from agentenvs.integrations.verl.dataset import AGENT_NAME, main  # noqa: E402


def test_dataset_command_writes_what_rlhfdataset_reads(tmp_path, capsys, tool_model):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from agentenvs.agents.prompts import system_prompt
    from agentenvs.registration import make

    assert main(["TextCraft-v0", "--split", "test", "-o", str(tmp_path), "--limit", "5"]) == 0
    path = tmp_path / "test.parquet"
    assert capsys.readouterr().out.strip() == str(path)
    config = OmegaConf.create(
        {"max_prompt_length": 8192, "cache_dir": str(tmp_path / "cache"), "return_raw_chat": True}
    )
    data = RLHFDataset(str(path), AutoTokenizer.from_pretrained(tool_model), config)
    expected = make("TextCraft-v0").task_ids("test")[:5]
    assert len(data) == 5
    rows = [data[i] for i in range(5)]
    assert [r["extra_info"]["task_id"] for r in rows] == expected
    assert {r["extra_info"]["env_id"] for r in rows} == {"TextCraft-v0"}
    assert {r["agent_name"] for r in rows} == {AGENT_NAME}
    assert rows[0]["raw_prompt"][0] == {"role": "system", "content": system_prompt("TextCraft-v0")}


def test_dataset_command_reports_bad_input(tmp_path, capsys):
    assert main(["TextCraft-v0", "--split", "nosuch", "-o", str(tmp_path)]) == 2
    assert "unknown split" in capsys.readouterr().err
    assert main(["NoSuchEnv-v0", "-o", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())
