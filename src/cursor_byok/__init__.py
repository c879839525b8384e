"""cursor-byok: Cursor's agent protocol served against your own LLM provider and key."""

__version__ = "0.1.0"
