"""Execution paradigms: the ReAct loop and the plan executor.

Internal: run them through ``nonoka.Runner``.
"""
