//! End-to-end tests for envelopes (being written).
