"""Trio loops of a broker process that are not request handling: each takes the object it
serves (the ``Broker``, a coordinator) and runs until cancelled (``serve_*``, reporting
readiness via task_status). The coordinators' loops (``txn``, ``group_timers``) call the
one-shot operations the coordinators offer."""
