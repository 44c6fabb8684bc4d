"""``python -m nonoka`` is the ``nonoka`` command.

``python -m nonoka bridge`` (what ``nonoka opencode init`` configures) runs once per model
step, so it goes straight to the bridge, as ``nonoka.cli.main`` would, without importing
the CLI package first (~0.2 ms).
"""

import sys


def _run() -> None:
    args = sys.argv[1:]
    if args[:1] == ["bridge"] and not {"-h", "--help"} & set(args[1:]):
        from nonoka.bridge.server import main as bridge_main

        sys.exit(bridge_main(args[1:]))
    from nonoka.cli.main import main

    main(args)


_run()
