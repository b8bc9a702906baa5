"""Agents that act in sandgym environments (oracle, baselines, LLMs over OpenAI-compatible APIs)."""
