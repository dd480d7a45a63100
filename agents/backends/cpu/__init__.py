"""The CPU decoding engine of the transformers backend (``TransformersPolicy(cpu_engine="auto")``).

Measurements and history: ``docs/cpu-engine.md``.
"""
