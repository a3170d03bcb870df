"""Converters from public dataset formats, and synthetic generators in those formats."""
