"""The evaluation harness: `vlrl eval`, evaluation during training, comparing runs."""
