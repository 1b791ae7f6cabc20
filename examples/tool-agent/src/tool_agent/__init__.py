"""A tool-calling LangGraph agent, served by runstream (or `langgraph dev`) from langgraph.json."""
