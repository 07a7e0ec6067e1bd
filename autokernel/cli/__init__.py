"""The Typer command line; the only layer that prints."""
