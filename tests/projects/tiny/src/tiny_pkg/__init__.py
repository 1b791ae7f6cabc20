"""A package under a dependency path (`./src`), imported by module name."""
