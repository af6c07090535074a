"""Provider seam (SPEC L7): the protocol, typed deltas and the implementations."""
