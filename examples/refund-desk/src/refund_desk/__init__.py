"""A refund desk: a LangGraph project runstream serves unchanged (examples/refund-desk)."""
