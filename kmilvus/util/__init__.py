"""Small shared helpers (errors, types, hashing, processes)."""
