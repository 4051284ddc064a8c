"""The supervisor: spawns brokers, restarts the dead, forwards signals. Never writes
cluster state; imports only kaas.settings-level facts."""
