"""The CPU decoding engine of the transformers backend (``TransformersPolicy(cpu_engine="auto")``).

The measurements behind every part: ``docs/cpu-engine.md``.
"""
