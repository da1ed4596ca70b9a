//! End-to-end tests for arena (being written).
