//! memfs: an in-memory backend (filled in by the memfs work item).
