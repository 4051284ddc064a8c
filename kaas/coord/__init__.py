"""Coordinators: transactions (``coord.txn``) and consumer groups (``coord.group``),
seeing the broker only through ``coord.ports``."""
