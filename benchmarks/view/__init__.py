"""``agentenvs view``: a browser page for eval, train rl and replay runs, and two runs compared.

:mod:`~agentenvs.benchmarks.view.load` tells a run's kind from its files and reads it into a
:mod:`~agentenvs.benchmarks.view.runs` record,
:mod:`~agentenvs.benchmarks.view.records` turns an episode into what the page shows,
:mod:`~agentenvs.benchmarks.view.report` computes the overview, task list and comparisons,
:mod:`~agentenvs.benchmarks.view.training` the curves of a training run,
:mod:`~agentenvs.benchmarks.view.page` the page's data and the exported file,
:mod:`~agentenvs.benchmarks.view.server` serves it, :mod:`~agentenvs.benchmarks.view.cli` is the
command, and ``static/`` holds the page (plain JavaScript, no build step, nothing fetched from
the network).
"""
