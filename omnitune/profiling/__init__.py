"""`omnitune profile`: each device's step times and the links between them, measured through the
runtime's own processes."""
