"""Skald: the Django project and the product core."""
