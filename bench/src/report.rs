//! What a row reports: one line of the table ([`Row`]), the whole run
//! ([`Report`], as markdown and JSON) and the words a row's status and numbers
//! are written in. Its own file so that every row module, and the driver that
//! collects them, can share the shape of a row without importing each other.

use serde_json::{Value, json};

use crate::settings::Settings;

/// One line of the table.
pub struct Row {
    pub id: u8,
    pub measure: String,
    pub node: String,
    pub comparison: String,
    pub ratio: String,
    pub target: String,
    /// "met", "missed", "not measured", "failed", "smoke".
    pub status: String,
    pub raw: Value,
}

pub struct Report {
    pub rows: Vec<Row>,
    pub meta: Value,
}

impl Report {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| # | Measure | Agora Node | Comparison | Ratio | Target | Status |\n|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                row.id, row.measure, row.node, row.comparison, row.ratio, row.target, row.status
            ));
        }
        out
    }

    pub fn json(&self) -> Value {
        json!({
            "meta": self.meta,
            "table_markdown": self.markdown(),
            "rows": self.rows.iter().map(|r| json!({
                "row": r.id, "measure": r.measure, "node": r.node, "comparison": r.comparison,
                "ratio": r.ratio, "target": r.target, "status": r.status, "raw": r.raw,
            })).collect::<Vec<_>>(),
        })
    }

    pub fn broken(&self) -> bool {
        self.rows.iter().any(|r| r.status == "failed")
    }
}

pub(crate) fn verdict(settings: &Settings, met: bool) -> String {
    match (settings.smoke, met) {
        (true, _) => "smoke run (not a result)".into(),
        (false, true) => "met".into(),
        (false, false) => "**missed**".into(),
    }
}

/// The status of a row without a target: failed if any request failed, else measured.
pub(crate) fn untargeted_status(settings: &Settings, failed: u64) -> String {
    if failed > 0 {
        "failed".into()
    } else if settings.smoke {
        "smoke run (not a result)".into()
    } else {
        "measured".into()
    }
}

pub(crate) fn fmt_rate(rate: f64) -> String {
    if rate >= 100.0 {
        format!("{rate:.0}")
    } else {
        format!("{rate:.1}")
    }
}
