"""Skald's implementations of the kernel's ports (the seed's ``loop_adapters``)."""
