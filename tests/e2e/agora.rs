//! End-to-end tests for agora (being written).
