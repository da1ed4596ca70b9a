//! The settings every row reads, made by `main.rs` from the command line. Its
//! own file so that the rows read them without importing the crate root that
//! declares and runs them.

use std::path::PathBuf;
use std::time::Duration;

/// Settings every row reads.
pub struct Settings {
    pub smoke: bool,
    pub duration: Duration,
    pub warmup: Duration,
    pub rounds: usize,
    pub connections: usize,
    pub node_bin: PathBuf,
}
