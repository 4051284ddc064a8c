"""The group coordinator's KIP-848 consumer groups, and classic members inside them."""
