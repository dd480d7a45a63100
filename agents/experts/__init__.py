"""Scripted experts (teachers), one per environment, acting from environment state."""

from __future__ import annotations

from agentenvs.agents.experts.base import EXPERTS, Expert, ExpertDecision, ExpertFailure, make_expert

__all__ = ["EXPERTS", "Expert", "ExpertDecision", "ExpertFailure", "make_expert"]
