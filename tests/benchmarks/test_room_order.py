"""The rooms ``room_order`` replays are the ones RL's trainer drew in those iterations."""

from __future__ import annotations

from agentenvs.benchmarks.learning.room_order import _format, drawn_rooms
from agentenvs.train.rl.starts import StartStream


def test_drawn_rooms_are_the_trainers_draws_of_those_iterations():
    ids = [f"seed/{i}" for i in range(20)]
    stream = StartStream(ids, seed=3)
    iterations = [stream.take(4) for _ in range(5)]  # 4 rooms an iteration, as the trainer takes
    assert drawn_rooms(ids, 3, first=2, count=2, per=4) == iterations[1] + iterations[2]
    assert sorted(drawn_rooms(ids, 3, first=1, count=5, per=4)) == sorted(ids)  # one pass
    assert drawn_rooms(ids, 4, first=1, count=1, per=4) != iterations[0]  # another seed's order


def test_format_puts_the_sft_model_beside_each_arm():
    rows = [
        {
            "seed": 0,
            "iterations": "1-8",
            "rooms": 64,
            "sft": 0.125,
            "arms": {"grpo": 0.1394, "ptgpo": 0.133},
        }
    ]
    text = _format(rows, 8)
    assert "| seed | iterations | rooms | SFT model | grpo | ptgpo |" in text
    assert "| 0 | 1-8 | 64 | 0.125 | 0.139 | 0.133 |" in text
