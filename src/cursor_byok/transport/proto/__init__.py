"""TEMPORARY: the generated classes moved to `cursor_byok.transport.cursor.proto`. Removed
before the runtime redesign lands (only a benchmark still importing the old path uses it)."""
