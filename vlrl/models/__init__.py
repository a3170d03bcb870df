"""Model families (the `ModelFamily` seam, base.py; families.py finds them), loading, prompt rendering, the shared-prefix forward, tiny local checkpoints."""
