"""Built-in jobs: the demo, and (later) scenarios with a known cause."""
