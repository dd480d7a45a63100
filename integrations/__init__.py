"""agentenvs inside the training engines researchers already run: TRL and verl.

One subpackage or module per engine, each an optional extra (``pip install -e ".[trl]"`` /
``".[verl]"``; ``make install`` installs both on CPU). This package may import every other
package of the project; nothing imports it. See ``docs/integrations.md``.

Both adapters play an episode with :class:`agentenvs.agents.episode.TextEpisode`, the stepper our
own rollouts use.

* :mod:`agentenvs.integrations.trl`: environments for ``GRPOTrainer(environment_factory=...)``.
* :mod:`agentenvs.integrations.verl`: our advantage estimators and Prefix-GRPO's loss in verl's
  registries, an agent loop, and the parquet dataset command.
"""
