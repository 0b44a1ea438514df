"""Probes: short real training of a workload by each protocol's own update rule on virtual
workers (emulator), and short real jobs that time a configuration (timing). Imports torch."""
