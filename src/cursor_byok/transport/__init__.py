"""Cursor protocol: Connect transport, the Cursor dialect and the runner that executes commands."""
