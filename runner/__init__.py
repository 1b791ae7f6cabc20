"""The runstream worker: arq jobs that execute LangGraph graphs into run streams."""
