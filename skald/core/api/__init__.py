"""API conventions every app shares: the error body, permissions by role, the error schema."""
