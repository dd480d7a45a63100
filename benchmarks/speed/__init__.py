"""Speed benchmarks of the environments, one module per environment (see ``envs``)."""
