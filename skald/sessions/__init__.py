"""Conversations: create sessions, submit messages, stop exchanges (services and selectors)."""
