"""The data a session is made of: messages, conversation entries, plans, the snapshot.

The store keeps these and the model adapters read them; nothing here runs a turn
(that is ``nonoka.runtime``). Importing the package loads nothing: ``tokens`` and
``prefix_memo`` are standard library only and serve the bridge's early dispatch too.

Internal: import the public names from ``nonoka``; this package's layout may change.
"""
