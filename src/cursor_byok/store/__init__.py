"""Persistence of conversation state, call records and dedupe keys. It stores; it never decides."""
