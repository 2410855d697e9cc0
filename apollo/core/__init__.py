"""The kernel and the protocol every actor and runtime shares: messages and their wire codecs,
effects, the attempt lifecycle, clocks, job specs, run records, the cluster model."""
