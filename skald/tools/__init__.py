"""Skald's built-in tools for the kernel's registry."""
