"""Applications over the engine: the demo, plots of a run, `vlrl plan`."""
