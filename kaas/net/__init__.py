"""The trio shell: listeners, connections, responses in request order."""
