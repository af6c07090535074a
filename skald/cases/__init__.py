"""Cases and troubleshoot runs: services (writes) and selectors (reads)."""
