"""A module beside agent.py: importable because the project's folder is on sys.path."""


def reply_to(text: str) -> str:
    return f"you said: {text}"
