"""Operating a node: data folder, configuration, logs, metrics, backups, doctor and the ops CLI."""
