"""Test and demo helpers that never touch a hub: tiny local checkpoints."""

from vlrl.testing.tiny import TinySpec, resolve_tiny, tiny_checkpoint, write_tiny_checkpoint

__all__ = ["TinySpec", "resolve_tiny", "tiny_checkpoint", "write_tiny_checkpoint"]
