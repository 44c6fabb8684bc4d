"""The runtime core: agents, tools, the ``Runner`` and its paradigms (ReAct, plans), the
mutable ``Session`` with its ledger of limits and usage, and the conversation window.

Front ends (the bridge, ``nonoka run``) reach it through ``nonoka.turn``; it stands on
``nonoka.state`` (the data), ``nonoka.store`` and ``nonoka.llm``.

Internal: import the public names from ``nonoka``; this package's layout may change.
"""
