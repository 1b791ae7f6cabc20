"""The runstream worker: its job loop takes runs off the queue (jobs in arq's format) and executes
their LangGraph graphs into run streams."""
