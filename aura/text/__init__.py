"""Text input every stage shares: documents read from files and datasets (sources, readers, cleaning) and
chat templates."""
