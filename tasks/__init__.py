"""Built-in task plugins, one module per task family; tasks/benchmarks/ the public benchmarks.
Each registers as an entry point of the group `vlrl.tasks` in pyproject.toml, the way any
other package's tasks do."""
