"""Readers of other estimators' input formats."""
