"""The RL loop, the SFT cold-start loop, checkpoints and logging."""
