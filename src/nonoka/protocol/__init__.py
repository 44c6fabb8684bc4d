"""The NDJSON bridge protocol, version "1": what a provider and ``nonoka bridge`` exchange.

Both sides import it; it imports neither. ``frames`` is the standard-library layer (frame
types, capabilities, the checks and the lines a bridge writes before pydantic loads),
``values`` the enumerated field values (finish reasons, error and warning codes…),
``models`` the typed pydantic models, ``turns`` where a host's history splits, and
``schema.json`` the JSON Schema generated from the models. Nothing is imported here, so
importing a submodule stays as cheap as that submodule.
"""
