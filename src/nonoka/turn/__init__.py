"""The turn service: one turn of a session, done the same way for every front end.

``service.TurnService`` opens nothing itself beyond what ``project`` gives it: the
project's stores (``project.open_stores``) and the model (``project.configured``). It
takes the session's lease, creates or loads the session, runs the ``Runner``, records
the index row, the timeline and the usage in its ``journal.Journal``, and hands the
stream of runtime events to its caller. The bridge adds the decision chain and the
protocol; ``nonoka run`` adds the terminal.

Nothing is imported here: ``nonoka sessions`` needs ``project`` without the runtime.
"""
