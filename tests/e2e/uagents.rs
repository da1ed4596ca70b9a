//! End-to-end tests for uagents (being written).
