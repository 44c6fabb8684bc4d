"""The bridge: ``nonoka bridge`` speaking the NDJSON protocol on stdio.

``nonoka.bridge.frames`` holds the cheap, dependency-free parts (constants, frame checks,
the ``protocol_ack`` line) so a bridge can answer before pydantic is imported;
``nonoka.bridge.protocol`` holds the typed pydantic models. Nothing is imported here, so
importing a submodule stays as cheap as that submodule.

Internal: the protocol in docs/protocol.md is the contract, not these modules.
"""
