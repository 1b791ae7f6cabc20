from tests.custom_graphs import builder

__all__ = ["builder"]
