"""A user's LangGraph project, the contract both the server and the worker read: its
`langgraph.json`, loading its graphs, their catalog and `configurable` keys, a graph's context,
its auth user and its store's index."""
