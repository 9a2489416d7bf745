//! Cross-crate end-to-end tests for tidemark live in `tests/tests/`.
