"""Advantage estimators and policy losses of the GRPO family, as plain tensor functions."""
