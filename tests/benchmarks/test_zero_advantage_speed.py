"""The zero-advantage skip benchmark runs and reports a same-run ratio."""

from __future__ import annotations

from agentenvs.benchmarks.speed.zero_advantage import main


def test_zero_advantage_speed_prints_the_ratio(tmp_path, capsys):
    out = tmp_path / "zero.md"
    args = ["--rows", "4", "--prompt", "8", "--response", "4", "--repeats", "1"]
    assert main([*args, "--zero-frac", "1.0", "0.5", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| 100% |" in text and "| 50% |" in text and "x |" in text
    assert "| 100% |" in capsys.readouterr().out
