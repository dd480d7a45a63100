"""``agentenvs eval``: Avg@k / Pass@k of an agent on an environment split, resumable.

    agentenvs eval TextCraft-v0 --agent expert --split test -k 8 --out results/tc-expert
    agentenvs eval TextCraft-v0 --agent hf:Qwen/Qwen3-1.7B -k 8 --agent-opt dtype=bfloat16
    agentenvs eval Sokoban-v0 --agent openai:my-model@http://127.0.0.1:8000/v1 -k 8 -n 16
    agentenvs eval ALFWorld-v0 --agent expert --env-workers ray --ray-address auto
    agentenvs eval ALFWorld-v0 --protocol prefix-grpo --agent hf:Qwen/Qwen3-1.7B -k 8

Every task of the split (with ``--limit N``: N of them, a seeded sample spread over the task
families, :func:`agentenvs.agents.task_sample.sample_tasks`) is played ``-n`` times (default
``-k``), all episodes batched together (:func:`agentenvs.agents.rollout.run_rollouts`), under a
benchmark protocol (``--protocol``, default the environment's own:
:mod:`agentenvs.agents.protocols`), which fixes the environment variant, prompt, parser, handling
of unparseable replies, turn limit, history and sampling; an explicit flag (``--max-turns``,
``--temperature``, ``--top-p``, ``--max-new-tokens``, ``--history``) overrides its setting and is
recorded in ``overrides``. Each finished episode is appended to ``OUT/trajectories.jsonl`` at
once; a rerun with the same ``--out`` reads that file and plays only the episodes it lacks (a
corrupt last line from a killed run is dropped), so an interrupted run resumes without repeating
or losing an episode; each reply is drawn with a seed of its episode and turn, so the resumed run
samples the replies the unbroken one would have (a run file recorded with per-call seeding cannot
resume). ``OUT/run.json`` records the settings; resuming with different ones is refused (pass
``--fresh`` to start over); it also names the protocol, every setting the protocol fixed
(``protocol_settings``), the overrides, the environment's ``variant`` and the chosen task ids.
Environments step where ``--env-workers`` says (:mod:`agentenvs.agents.envworkers`: this process,
local worker processes, Ray actors on a cluster, or ``agentenvs serve`` servers).

At the end: ``OUT/results.md`` and ``OUT/results.csv`` (Avg@k and Pass@k per task family and
overall), ``OUT/results.png`` (a bar plot, when matplotlib is installed: the ``train`` extra) and
``OUT/results.json`` (the rows with the run's metadata: protocol, its settings, overrides,
variant, task ids, errors); ``results.md`` states the protocol and variant under its title.

An episode that ended in an error (its environment, worker or policy failed) is not a result:
it is left out of Avg@k and Pass@k, counted beside them and per error type (the table, the
``errors`` of ``results.json``), and played again by the next run into the same ``--out``. An
environment whose dependency does not import stops the run before any episode, naming the extra
to install (:class:`agentenvs.registration.MissingDependencyError`); a run whose every episode
errored exits 1 with the first error.

The modules, one idea each:

* :mod:`~agentenvs.benchmarks.eval.settings`: :class:`EvalSettings`, a run's definition, with
  the protocol's settings resolved and the overrides named;
* :mod:`~agentenvs.benchmarks.eval.evaluate`: :func:`evaluate`, the run itself (tasks, resume,
  rollouts, tables);
* :mod:`~agentenvs.benchmarks.eval.resume`: the run file, the episodes on disk, the resume line;
* :mod:`~agentenvs.benchmarks.eval.metrics`: Avg@k and Pass@k (unbiased estimator) per family;
* :mod:`~agentenvs.benchmarks.eval.writers`: ``results.md`` / ``.csv`` / ``.json`` / ``.png``;
* :mod:`~agentenvs.benchmarks.eval.plot`: the bar plot (optional matplotlib);
* :mod:`~agentenvs.benchmarks.eval.progress`: the progress line;
* :mod:`~agentenvs.benchmarks.eval.cli`: the command line, its parser built from a table.
"""
