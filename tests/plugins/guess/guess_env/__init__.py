"""Guess-the-number, an agentenvs environment plugin (``plugin.py`` declares it)."""
