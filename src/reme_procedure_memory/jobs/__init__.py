"""The ReMe steps of the plugin's jobs and their argument models (validation and advertised schemas)."""
