"""Pure domain logic: no I/O, no trio, no clock; imports only stdlib and kio.schema.errors."""
