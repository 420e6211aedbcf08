"""tatu interpolate: the path between a seed and its fine-tune (see docs/architecture.md)."""
