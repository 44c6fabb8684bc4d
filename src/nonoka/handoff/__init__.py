"""A session handed from one coding agent to another, whole: the stored conversation
written into the next agent's own resumable transcript, and a branch of the session
that the agent's first request lands on (docs/handoff.md).

Internal: this package's layout may change.
"""
