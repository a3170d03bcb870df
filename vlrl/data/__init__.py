"""The data layer: samples, reading records (json / jsonl) and published tables, the resumable prompt stream."""
