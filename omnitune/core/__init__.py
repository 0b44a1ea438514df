"""The shared vocabulary: the protocols, clusters and run specs, the profile and plan files, strict
JSON, the environment, the user-error type. Pure: no torch, no processes."""
