"""Web search backends: each answers a `WebSearchJob` with `SearchResults` or `JobFailed`."""
