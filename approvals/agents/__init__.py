"""An agent's governance settings over the policy API (issue 32)."""
