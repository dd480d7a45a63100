"""agentenvs in verl 0.9.1: estimators, an agent loop, the dataset command.

* :mod:`agentenvs.integrations.verl.estimators`: ``gigpo`` and ``ptgpo`` in verl's
  advantage-estimator registry (:func:`install`), with their step-level inputs in the ``DataProto``
  non-tensor batch.
* :mod:`agentenvs.integrations.verl.prefix_loss`: Prefix-GRPO's objective in verl's policy-loss
  registry (``actor.policy_loss.loss_mode=prefix_grpo``), the teacher prefix as response tokens.
* :mod:`agentenvs.integrations.verl.agent_loop`: ``agentenvs_agent``, a verl agent loop that plays
  one agentenvs episode with our prompts and parser.
* :mod:`agentenvs.integrations.verl.dataset`: ``python -m agentenvs.integrations.verl.dataset ENV
  --split train -o DIR`` writes the parquet file verl's ``RLHFDataset`` reads.

Importing this package imports no verl module; :func:`install` does.
"""

from __future__ import annotations

__all__ = ["install"]


def install() -> None:
    """Register our estimators and Prefix-GRPO's loss in verl (see
    :func:`agentenvs.integrations.verl.estimators.install`,
    :func:`agentenvs.integrations.verl.prefix_loss.install`); idempotent, so it can be Ray's
    ``worker_process_setup_hook``."""
    from agentenvs.integrations.verl import estimators, prefix_loss

    estimators.install()
    prefix_loss.install()
