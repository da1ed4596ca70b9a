//! End-to-end tests for hai (being written).
