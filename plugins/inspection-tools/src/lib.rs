//! Tools for the HAI assistant (the HAI specification §4–5), offered through the
//! host so the assistant never runs them itself:
//!
//! - `search_regulations` (low risk): searches a bundled table of food-safety
//!   regulation summaries by keyword and ranks the matches.
//! - `generate_inspection_report` (high risk: the host asks a human first):
//!   drafts the report of an inspection from the regulations that apply to it
//!   and stores it permanently in the plugin's key-value store.
//!
//! Both are deterministic: the same arguments give the same result.

use agora_plugin_sdk::prelude::*;

struct InspectionTools;

/// One bundled regulation summary. Illustrative texts, not legal advice.
struct Regulation {
    id: &'static str,
    title: &'static str,
    keywords: &'static [&'static str],
    text: &'static str,
}

const REGULATIONS: &[Regulation] = &[
    Regulation {
        id: "FS-101",
        title: "Cold storage temperatures",
        keywords: &[
            "food",
            "storage",
            "refrigeration",
            "temperature",
            "cold",
            "chilled",
        ],
        text: "Chilled foods are stored at or below 7 °C; high-risk foods such as raw meat and fish at or below 4 °C.",
    },
    Regulation {
        id: "FS-102",
        title: "Frozen storage",
        keywords: &["food", "storage", "frozen", "freezer", "temperature"],
        text: "Frozen foods are kept at -18 °C or colder and are not refrozen after thawing.",
    },
    Regulation {
        id: "FS-103",
        title: "Dry goods storage",
        keywords: &["food", "storage", "dry", "pests", "shelving"],
        text: "Dry goods are stored off the floor, in closed containers, in a clean and pest-free area.",
    },
    Regulation {
        id: "FS-201",
        title: "Hot holding",
        keywords: &["food", "temperature", "hot", "holding", "restaurant", "buffet"],
        text: "Cooked food held hot for service stays at or above 60 °C; below that it is sold within two hours or discarded.",
    },
    Regulation {
        id: "FS-202",
        title: "Cooling of cooked food",
        keywords: &["food", "cooling", "temperature", "cooked", "restaurant"],
        text: "Cooked food is cooled from 60 °C to 7 °C within five hours before it is refrigerated.",
    },
    Regulation {
        id: "HY-301",
        title: "Hand washing facilities",
        keywords: &["hygiene", "hands", "washing", "staff", "restaurant", "kitchen"],
        text: "Every food preparation area has a hand basin with warm running water, soap and disposable towels.",
    },
    Regulation {
        id: "HY-302",
        title: "Cleaning and disinfection schedule",
        keywords: &[
            "hygiene",
            "cleaning",
            "disinfection",
            "kitchen",
            "restaurant",
            "surfaces",
        ],
        text: "Food contact surfaces are cleaned and disinfected after each use and following a written schedule.",
    },
    Regulation {
        id: "HY-303",
        title: "Pest control",
        keywords: &["hygiene", "pests", "rodents", "insects", "restaurant", "storage"],
        text: "Premises are protected against pests; traps and inspections are logged at least monthly.",
    },
    Regulation {
        id: "AL-401",
        title: "Allergen information",
        keywords: &[
            "allergens",
            "allergy",
            "labelling",
            "menu",
            "restaurant",
            "information",
        ],
        text: "The fourteen major allergens present in each dish are declared to customers in writing or on request.",
    },
    Regulation {
        id: "TR-501",
        title: "Traceability records",
        keywords: &["traceability", "records", "suppliers", "recall", "food"],
        text: "Businesses record the supplier of every ingredient and the customers of every product they supply onward.",
    },
    Regulation {
        id: "HA-601",
        title: "HACCP food safety plan",
        keywords: &[
            "haccp",
            "plan",
            "hazards",
            "critical",
            "control",
            "food",
            "safety",
            "restaurant",
        ],
        text: "Food businesses keep a HACCP-based plan identifying hazards, critical control points and corrective actions.",
    },
    Regulation {
        id: "WA-701",
        title: "Drinking water",
        keywords: &["water", "drinking", "ice", "supply", "safety"],
        text: "Water used for food or ice is of drinking water quality; private supplies are tested yearly.",
    },
];

const STOPWORDS: &[&str] = &[
    "the",
    "and",
    "for",
    "are",
    "what",
    "which",
    "with",
    "about",
    "regulations",
    "regulation",
    "rules",
    "rule",
    "from",
    "that",
    "this",
    "there",
    "their",
    "please",
    "me",
    "of",
    "on",
    "in",
];

#[derive(Deserialize)]
struct SearchArguments {
    query: Option<String>,
    limit: Option<u64>,
}

#[derive(Deserialize)]
struct ReportArguments {
    inspection_id: Option<String>,
    notes: Option<String>,
}

fn terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.len() >= 3 && !STOPWORDS.contains(&w.as_str()))
        .map(|w| w.trim_end_matches('s').to_string())
        .collect();
    terms.dedup();
    terms
}

fn score(regulation: &Regulation, terms: &[String]) -> usize {
    let title = regulation.title.to_lowercase();
    let text = regulation.text.to_lowercase();
    terms
        .iter()
        .map(|term| {
            let keyword = regulation.keywords.iter().any(|k| k.starts_with(term.as_str()));
            usize::from(keyword) * 2
                + usize::from(title.contains(term.as_str()))
                + usize::from(text.contains(term.as_str()))
        })
        .sum()
}

pub fn search(query: &str, limit: usize) -> Result<Value, String> {
    let query = query.trim();
    if query.is_empty() {
        return Err("the query is empty: name a topic, e.g. \"food storage\"".into());
    }
    if query.chars().count() > 500 {
        return Err("the query is longer than 500 characters".into());
    }
    let terms = terms(query);
    let mut ranked: Vec<(usize, &Regulation)> = REGULATIONS
        .iter()
        .map(|r| (score(r, &terms), r))
        .filter(|(score, _)| *score > 0)
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.id.cmp(b.1.id)));
    let total = ranked.len();
    let results: Vec<Value> = ranked
        .into_iter()
        .take(limit)
        .map(|(score, r)| json!({"id": r.id, "title": r.title, "text": r.text, "score": score}))
        .collect();
    Ok(json!({
        "query": query,
        "count": total,
        "summary": format!("Found {total} relevant regulation{}", if total == 1 { "" } else { "s" }),
        "results": results,
    }))
}

/// FNV-1a: a stable, dependency-free fingerprint for report ids.
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

pub fn valid_inspection_id(id: &str) -> bool {
    let parts: Vec<&str> = id.split('-').collect();
    matches!(parts.as_slice(), ["INS", year, number]
        if year.len() == 4 && year.chars().all(|c| c.is_ascii_digit())
            && (1..=6).contains(&number.len()) && number.chars().all(|c| c.is_ascii_digit()))
}

pub fn draft_report(inspection_id: &str, notes: Option<&str>) -> Result<Value, String> {
    if !valid_inspection_id(inspection_id) {
        return Err(format!(
            "{inspection_id:?} is not an inspection id like INS-2024-001"
        ));
    }
    let fingerprint = fnv1a(inspection_id);
    // Each inspection checks three regulations, chosen by its id.
    let findings: Vec<Value> = (0..3u32)
        .map(|i| {
            let regulation =
                &REGULATIONS[(fingerprint.rotate_left(i * 11) as usize + i as usize * 5) % REGULATIONS.len()];
            let compliant = (fingerprint >> (i + 3)) & 1 == 0;
            json!({
                "regulation": regulation.id,
                "title": regulation.title,
                "outcome": if compliant { "compliant" } else { "non-compliant" },
            })
        })
        .collect();
    let violations = findings
        .iter()
        .filter(|f| f["outcome"] == "non-compliant")
        .count();
    let report_id = format!("RPT-{}-{:08X}", &inspection_id[4..], fingerprint);
    Ok(json!({
        "report_id": report_id,
        "inspection_id": inspection_id,
        "status": "generated",
        "findings": findings,
        "violations": violations,
        "notes": notes.unwrap_or_default(),
        "summary": format!("Generated report {report_id} for {inspection_id}: {violations} of 3 checks non-compliant"),
    }))
}

impl Plugin for InspectionTools {
    fn manifest() -> Manifest {
        Manifest::new("inspection-tools", env!("CARGO_PKG_VERSION"))
            .description("Regulation search and inspection reports for the HAI assistant")
            .tool(
                "search_regulations",
                "Searches the bundled food-safety regulations by keyword",
                r#"{"type":"object","x-read-only":true,"properties":{"query":{"type":"string","minLength":1,"maxLength":500},"limit":{"type":"integer","minimum":1,"maximum":10}},"required":["query"]}"#,
                Risk::Low,
            )
            .tool(
                "generate_inspection_report",
                "Generates the official inspection report, which is stored permanently",
                r#"{"type":"object","properties":{"inspection_id":{"type":"string","pattern":"^INS-[0-9]{4}-[0-9]{1,6}$"},"notes":{"type":"string","maxLength":2000}},"required":["inspection_id"]}"#,
                Risk::High,
            )
    }

    fn handle(_message: Message) -> Result<String, Failure> {
        Err(Failure::unsupported(
            "inspection-tools only offers tools; call them through the host",
        ))
    }

    fn run_tool(name: String, arguments: ToolArguments) -> Result<String, ToolFailure> {
        match name.as_str() {
            "search_regulations" => search_regulations(arguments.parse()?),
            "generate_inspection_report" => generate_inspection_report(arguments.parse()?),
            other => Err(ToolFailure::unknown_tool(other)),
        }
    }
}

fn search_regulations(args: SearchArguments) -> Result<String, ToolFailure> {
    let limit = args.limit.unwrap_or(5).clamp(1, 10) as usize;
    Ok(search(args.query.as_deref().unwrap_or_default(), limit)?.to_string())
}

fn generate_inspection_report(args: ReportArguments) -> Result<String, ToolFailure> {
    let id = args.inspection_id.unwrap_or_default();
    let notes: Option<String> = args.notes.map(|n| n.chars().take(2000).collect());
    let report = draft_report(&id, notes.as_deref())?;
    let stored = json!({"report": report, "stored_at_ms": host::now_ms()});
    host::kv_set_json(&format!("report:{id}"), &stored)
        .map_err(|e| ToolFailure::new(format!("the report could not be stored: {e}")))?;
    Ok(report.to_string())
}

export_plugin!(InspectionTools);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_ranks_storage_rules_first_and_refuses_an_empty_query() {
        let found = search("food storage", 5).unwrap();
        assert!(found["count"].as_u64().unwrap() >= 3);
        assert!(found["results"][0]["id"].as_str().unwrap().starts_with("FS-10"));
        assert!(search("   ", 5).is_err());
        assert_eq!(search("zeppelin", 5).unwrap()["count"], 0);
    }

    #[test]
    fn reports_are_deterministic_and_need_a_valid_id() {
        let a = draft_report("INS-2024-001", None).unwrap();
        assert_eq!(a, draft_report("INS-2024-001", None).unwrap());
        assert_ne!(
            a["report_id"],
            draft_report("INS-2024-002", None).unwrap()["report_id"]
        );
        assert!(draft_report("INS-24-1", None).is_err());
        assert!(draft_report("../etc", None).is_err());
    }
}
