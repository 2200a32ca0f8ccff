"""Shared test setup: every test builds its own plugin manager (fmest.testing)."""

import os

# Tests never reach for the network: the Hub lookup must fail fast and be skipped.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
