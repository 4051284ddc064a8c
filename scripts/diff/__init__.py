"""Differential conformance: the corpus of compat/diff against Apache Kafka and kaas."""
