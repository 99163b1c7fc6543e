"""The HTML report of a process: one self-contained file."""
