"""What the modern group kinds (KIP-848 consumer groups, KIP-932 share groups) share, pure:
the topic image they assign from (``topic_image``), the subscribed topics' metadata over
it (``subscriptions``), their members' sessions (``member_sessions``), the member epoch
check (``epochs``) and the group state derived from the epochs (``state``). It imports no
kind (an import-linter contract)."""
