"""KIP-932 share groups' membership, pure: the machine and the ``simple`` assignor."""
