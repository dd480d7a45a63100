"""The learning benchmark: held-out, multi-seed, resumable (see
:mod:`agentenvs.benchmarks.learning.run`).

Modules: :mod:`~agentenvs.benchmarks.learning.model` (the small model and the expert's SFT data),
:mod:`~agentenvs.benchmarks.learning.settings` (presets, train/eval task selection),
:mod:`~agentenvs.benchmarks.learning.stages` (SFT, replay, RL, evaluation; one finished file each),
:mod:`~agentenvs.benchmarks.learning.report` (mean +- SE over seeds, paired z against SFT, files),
:mod:`~agentenvs.benchmarks.learning.reproduce` (what makes two runs, or two machines, differ).
"""
