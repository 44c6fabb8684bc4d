"""Regenerate the protocol's committed artefacts from the pydantic models.

    python -m nonoka.protocol.generate           # write them
    python -m nonoka.protocol.generate --check   # exit 1, naming the stale files, if any

Two files: ``src/nonoka/protocol/schema.json`` (the JSON Schema, also shipped in the
wheel) and ``packages/nonoka-opencode-provider/src/protocol.gen.ts`` (the TypeScript
provider's types). Run it from a source checkout after changing a model; then rebuild the
provider's shipped JavaScript (``bash packages/nonoka-opencode-provider/build.sh``).
The test suite runs the same comparison as ``--check``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nonoka.protocol import schema as schema_module
from nonoka.protocol import typescript

ROOT = Path(__file__).resolve().parents[3]
"""The source checkout this module lives in (``src/nonoka/protocol/`` is three below)."""
SCHEMA_FILE = Path("src/nonoka/protocol/schema.json")
TYPESCRIPT_FILE = Path("packages/nonoka-opencode-provider/src/protocol.gen.ts")
COMMAND = "python -m nonoka.protocol.generate"


def outputs(schema: Mapping[str, Any] | None = None) -> dict[Path, str]:
    """Each generated file (relative to the checkout) with the text it should hold."""
    document = schema_module.build() if schema is None else schema
    return {SCHEMA_FILE: schema_module.render(document),
            TYPESCRIPT_FILE: typescript.render(document)}


def stale(expected: Mapping[Path, str], root: Path = ROOT) -> list[Path]:
    """The files under ``root`` whose text differs from ``expected`` (or that are missing)."""
    out = []
    for relative, text in expected.items():
        path = root / relative
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        if current != text:
            out.append(relative)
    return out


def stale_message(paths: Sequence[Path]) -> str:
    """What to tell someone whose generated files are out of date."""
    names = ", ".join(str(p) for p in paths)
    return (f"generated protocol files are stale ({names}): the models in "
            f"nonoka/protocol/models.py changed without regenerating them; run `{COMMAND}` "
            "and then `bash packages/nonoka-opencode-provider/build.sh`, and commit the result")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a generated file is stale")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the source checkout (default: the one this module is in)")
    args = parser.parse_args(argv)
    root: Path = args.root
    if not (root / TYPESCRIPT_FILE).parent.is_dir():
        print(f"{root} is not a nonoka source checkout (no {TYPESCRIPT_FILE.parent}/): "
              "run this from one", file=sys.stderr)
        return 2
    expected = outputs()
    changed = stale(expected, root)
    if args.check:
        if changed:
            print(stale_message(changed), file=sys.stderr)
            return 1
        print("the generated protocol files are up to date")
        return 0
    for relative in changed:
        (root / relative).write_text(expected[relative], encoding="utf-8")
        print(f"wrote {relative}")
    if TYPESCRIPT_FILE in changed:
        print("now run: bash packages/nonoka-opencode-provider/build.sh")
    if not changed:
        print("the generated protocol files are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
