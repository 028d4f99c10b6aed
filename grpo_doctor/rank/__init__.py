"""Rank side: the recording API and its integrations. Never imports pandas, matplotlib or jinja2."""
