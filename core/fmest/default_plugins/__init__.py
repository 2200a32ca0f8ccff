"""Plugins shipped inside the core. They use the public hooks like any third-party plugin."""
