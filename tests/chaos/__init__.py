"""The reliability suite (issue 20): crash, torn files, disk full, hostile input, soak; see docs/reliability.md."""
