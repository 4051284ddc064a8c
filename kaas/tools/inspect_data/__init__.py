"""``kaas inspect log|slots|cluster``: offline inspectors of a data directory, like Kafka's
kafka-dump-log. They read ``--data DIR`` directly (a stopped cluster, or a live one: every
state file is replaced by rename, so a read sees an old or a new version).

One concern per module: ``_files`` (read-only access), ``_segments`` (segment files as
recovery sees them), the views ``_log`` (a partition), ``_coordinators`` (transaction
slots, marker queues, fences, PID blocks, groups) and ``_cluster`` (the whole volume),
``_render`` (their human text) and ``_commands`` (the click commands). A view is a
TypedDict: what ``--json`` prints.

Invariants:
    - nothing under ``--data`` is ever written, created, renamed, truncated or deleted:
      files are opened ``O_RDONLY`` and read with ``pread``; no storage class that writes
      (``PartitionLog.open`` writes the manifest) is instantiated;
    - a file that does not parse is reported as such (``error``), never skipped silently
      and never "repaired".
"""

from __future__ import annotations

from kaas.tools.inspect_data._commands import inspect as inspect

__all__ = ["inspect"]
