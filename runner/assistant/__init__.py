"""The memory-aware assistant: a LangGraph project (langgraph.json here) runstream serves."""
