"""Trio loops of a broker process that are not request handling: each takes the
``Broker`` and runs until cancelled (``serve_*``, reporting readiness via task_status)."""
