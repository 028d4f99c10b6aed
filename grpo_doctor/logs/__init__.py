"""Parsers that find failure signatures in raw text logs (stdlib only)."""
