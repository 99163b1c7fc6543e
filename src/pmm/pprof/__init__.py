"""pprof profiles of a process's heap (gzipped profile.proto)."""
