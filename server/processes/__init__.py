"""The processes: the `runstream` CLI, `up`'s supervisor and its embedded services, the
server's workers, and the operator commands (`status`, ...)."""
