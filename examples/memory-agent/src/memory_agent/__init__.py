"""A chat agent with long-term memory (see agent.py)."""
