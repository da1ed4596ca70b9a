//! End-to-end tests for host (being written).
