"""The bridge: ``nonoka bridge`` serving the NDJSON protocol (``nonoka.protocol``) on stdio.

The server reads and checks the first line with ``nonoka.protocol.frames`` and writes
``protocol_ack`` before pydantic is imported. Nothing is imported here, so importing a
submodule stays as cheap as that submodule.

Internal: the protocol in docs/protocol.md is the contract, not these modules.
"""
