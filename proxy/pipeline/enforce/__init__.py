"""Enforce mode (#44): act on a verdict before the client acts on the answer."""
