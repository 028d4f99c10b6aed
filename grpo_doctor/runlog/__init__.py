"""Reading a run directory back: the one reader used by the report, watch's live tail and `summary`.

Below analysis/ and supervisor/, above schema/: it decodes rank files (one line cap, one pass per
file) into rank logs, and tabulates their phase, memory and step records into columns for the analysis.
"""
