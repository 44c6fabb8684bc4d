"""Execution paradigms: the ReAct loop and the plan executor."""
