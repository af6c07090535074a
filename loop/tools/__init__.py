"""Tool execution (SPEC L9-L11): registry, validation, the fixed pipeline, fan-out, exec bridge."""
