"""The kinds of benchmark: each module has the ``run_*`` functions a command calls, returning
the one JSON-able dict of a run."""
