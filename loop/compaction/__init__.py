"""Compaction with measured loss (SPEC L14): when to compact, what to keep, the summary prompt,
the probes that measure what the summary lost, and the durable cycle that ties them together."""
