"""Tasks: the `Task` interface and public benchmarks, finding tasks by name, scoring completions, a run's data sources, validation."""
