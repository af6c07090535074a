"""The Skald loop kernel: a durable, bounded agent loop that knows nothing of Skald.

Other apps plug in through the Protocols in :mod:`loop.ports`.
"""
