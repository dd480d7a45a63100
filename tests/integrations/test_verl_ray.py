"""verl: the documented Ray hook installs our estimators and the prefix loss in every Ray worker
process (verl's TaskRunner, where RayPPOTrainer.fit computes advantages, and its actor workers,
where ppo_loss runs, are Ray actors)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("verl")


@pytest.mark.slow  # starts a local Ray instance (about 25 s on two shared cores)
def test_worker_process_setup_hook_installs_our_estimators():
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": "agentenvs.integrations.verl.install"},
    )
    try:

        @ray.remote
        def probe():
            from verl.trainer.ppo import core_algos, ray_trainer
            from verl.workers import engine_workers

            names = sorted(n for n in ("gigpo", "ptgpo") if n in core_algos.ADV_ESTIMATOR_REGISTRY)
            return (
                names,
                "prefix_grpo" in core_algos.POLICY_LOSS_REGISTRY,
                getattr(ray_trainer.compute_advantage, "_agentenvs_wrapped", False),
                getattr(engine_workers.ppo_loss, "_agentenvs_wrapped", False),
            )

        assert ray.get(probe.remote(), timeout=300) == (["gigpo", "ptgpo"], True, True, True)
    finally:
        ray.shutdown()
