//! How a row measures a comparison: segments of load (warm-up unrecorded, the
//! server's CPU read around the measured part), summed per [`Side`], and the
//! node and its comparison alternated round by round so that whatever else
//! the machine is doing weighs on both alike. Shared by the rows of
//! `rows.rs` and the row modules, none of which it knows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::load::{self, Segment, Target};
use crate::procs::Server;
use crate::settings::Settings;

/// One side of a comparison, summed over its segments.
pub(crate) struct Side {
    pub(crate) total: Segment,
    pub(crate) cpu_seconds: f64,
    round_rates: Vec<f64>,
}

impl Side {
    pub(crate) fn new() -> Side {
        Side {
            total: Segment::empty(),
            cpu_seconds: 0.0,
            round_rates: Vec::new(),
        }
    }
    pub(crate) fn rate(&self) -> f64 {
        self.total.rate()
    }
    /// Successful requests per CPU-second the server process used while measured.
    pub(crate) fn per_cpu(&self) -> f64 {
        self.total.ok as f64 / self.cpu_seconds.max(1e-9)
    }
    pub(crate) fn json(&self) -> Value {
        json!({
            "ok": self.total.ok, "failed": self.total.failed,
            "first_failure": self.total.first_failure,
            "seconds": self.total.elapsed.as_secs_f64(),
            "rate_per_s": self.rate(), "round_rates": self.round_rates,
            "server_cpu_seconds": self.cpu_seconds, "per_cpu_second": self.per_cpu(),
            "p50_ms": self.total.p(0.5), "p99_ms": self.total.p(0.99), "max_ms": self.total.p(1.0),
        })
    }
}

/// How a segment loads its server.
#[derive(Clone, Copy)]
pub(crate) enum Shape {
    Closed,
    Rate(f64),
}

static SEQ: AtomicU64 = AtomicU64::new(0);

pub(crate) async fn segment(
    settings: &Settings,
    connections: usize,
    target: &Target,
    server: &Server,
    shape: Shape,
    side: &mut Side,
) {
    let warm = SEQ.fetch_add(1 << 32, Ordering::Relaxed);
    // Unrecorded warm-up, then the measured segment with the server's CPU read around it.
    match shape {
        Shape::Closed => {
            load::closed_loop(target, connections, Duration::ZERO, settings.warmup, warm).await;
        }
        Shape::Rate(rate) => {
            load::fixed_rate(target, connections, rate, Duration::ZERO, settings.warmup, warm).await;
        }
    }
    let base = SEQ.fetch_add(1 << 32, Ordering::Relaxed);
    let cpu_before = server.cpu_seconds();
    let measured = match shape {
        Shape::Closed => {
            load::closed_loop(target, connections, Duration::ZERO, settings.duration, base).await
        }
        Shape::Rate(rate) => {
            load::fixed_rate(target, connections, rate, Duration::ZERO, settings.duration, base).await
        }
    };
    side.cpu_seconds += server.cpu_seconds() - cpu_before;
    side.round_rates.push(measured.rate());
    side.total.merge(&measured);
}

/// `settings.rounds` closed-loop segments against one server, with nothing to alternate with.
pub(crate) async fn closed_rounds(settings: &Settings, target: &Target, server: &Server) -> Side {
    let mut side = Side::new();
    for _ in 0..settings.rounds {
        segment(
            settings,
            settings.connections,
            target,
            server,
            Shape::Closed,
            &mut side,
        )
        .await;
    }
    side
}

/// Alternate node and comparison segments, `settings.rounds` times each.
pub(crate) async fn alternate(
    settings: &Settings,
    connections: usize,
    node: (&Target, &Server),
    other: (&Target, &Server),
    shape: Shape,
) -> (Side, Side) {
    let (mut a, mut b) = (Side::new(), Side::new());
    for round in 0..settings.rounds {
        // Swap who goes first each round so neither always runs on the "fresher" machine.
        if round % 2 == 0 {
            segment(settings, connections, node.0, node.1, shape, &mut a).await;
            segment(settings, connections, other.0, other.1, shape, &mut b).await;
        } else {
            segment(settings, connections, other.0, other.1, shape, &mut b).await;
            segment(settings, connections, node.0, node.1, shape, &mut a).await;
        }
    }
    (a, b)
}
