"""Session operations: find, move, keep and throw away what a project has stored.

A library first, the ``nonoka sessions search|export|import|delete|prune`` and ``nonoka db
copy|check|vacuum|stats`` commands are thin layers over it. Every function takes a
project's ``ProjectStores`` and works on every engine through that engine's
``OpsBackend`` (``nonoka.ops.backends``), which the conformance suite checks.

- ``search``: full-text search over entries, titles and tool calls.
- ``export``: JSONL (lossless, streamed) and Markdown (for a person).
- ``importer``: a JSONL export back into any engine, all or nothing.
- ``copy``: every session from one database to another, verified and resumable.
- ``prune``: delete sessions, prune by age and status, the ``retention`` setting.
- ``maintenance``: integrity check, vacuum, statistics.

Internal: not part of the public API; the commands are the contract.
"""
