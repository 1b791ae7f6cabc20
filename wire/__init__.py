"""The wire: what runstream's processes and its clients say to each other, as msgspec Structs.

`events` holds the event protocol (docs/protocol.md section 4) and its one encoding, `responses`
the `/v1` answers, `approvals` the review request a graph asks and its answer. They import
msgspec and nothing of runstream, so the client takes them without the storage, and the
server, the worker and the storage take them from here rather than each declaring its own.
"""
