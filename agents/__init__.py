"""Agents that act in sandgym environments: oracle, random, replay, and LLMs over OpenAI-compatible APIs."""

from .base import AGENTS, Agent, AgentAction, AgentError, EpisodeStart, Usage, make_agent

__all__ = ["AGENTS", "Agent", "AgentAction", "AgentError", "EpisodeStart", "Usage", "make_agent"]
