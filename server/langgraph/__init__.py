"""LangGraph Agent Server API compatibility: the official LangGraph SDKs against runstream."""
