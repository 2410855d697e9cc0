"""What users run: the CLI, the simulator's assembly of a cluster, the live cluster's launcher and
processes, the client, the demo, chaos testing, replay, the report, plots and the native build."""
