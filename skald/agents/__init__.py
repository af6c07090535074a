"""The agent catalog: seeded agents and the catalog port the kernel reads."""
