"""pytest-readstream plugin entry point (filled in by the plugin work)."""
