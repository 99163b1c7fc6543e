"""pmd: the pmm daemon: events and samples into SQLite, leak alerts."""
