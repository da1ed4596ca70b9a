// Tools for the HAI assistant (hai-protocol.md §4–5) in JavaScript: a port of
// the Rust plugins/inspection-tools built into a component for the node's WIT
// world (plugin-sdk/wit/agora-node.wit) by componentize-js. Same tools, same
// risks, same bundled data, same results for the same arguments:
//
// - `search_regulations` (low risk): searches the bundled food-safety
//   regulation summaries by keyword and ranks the matches.
// - `generate_inspection_report` (high risk: the host asks a human first):
//   drafts the report of an inspection and stores it in the plugin's
//   key-value store under `report:<inspection id>`.
//
// Results are JSON objects with their keys in sorted order, as serde_json
// writes the Rust plugin's, so both give the same text.
//
// Instances are `warm`: a fresh JavaScript instance costs far more than a
// search. Nothing here is mutable module state (the tables are frozen
// constants), so a reused instance carries nothing from one call to the next
// beyond the engine's own heap.

import { nowMs } from "agora:node/host@0.1.0";
import {
  count,
  dispatchTool,
  kvSetJson,
  manifest as manifestOf,
  optional,
  string,
  toolArguments,
} from "../build/agora-plugin.js";
import { ALPHANUMERIC, UNPRINTABLE } from "../build/unicode.js";

// Illustrative texts, not legal advice. Identical to the Rust plugin's table.
const REGULATIONS = Object.freeze([
  {
    id: "FS-101",
    title: "Cold storage temperatures",
    keywords: ["food", "storage", "refrigeration", "temperature", "cold", "chilled"],
    text: "Chilled foods are stored at or below 7 °C; high-risk foods such as raw meat and fish at or below 4 °C.",
  },
  {
    id: "FS-102",
    title: "Frozen storage",
    keywords: ["food", "storage", "frozen", "freezer", "temperature"],
    text: "Frozen foods are kept at -18 °C or colder and are not refrozen after thawing.",
  },
  {
    id: "FS-103",
    title: "Dry goods storage",
    keywords: ["food", "storage", "dry", "pests", "shelving"],
    text: "Dry goods are stored off the floor, in closed containers, in a clean and pest-free area.",
  },
  {
    id: "FS-201",
    title: "Hot holding",
    keywords: ["food", "temperature", "hot", "holding", "restaurant", "buffet"],
    text: "Cooked food held hot for service stays at or above 60 °C; below that it is sold within two hours or discarded.",
  },
  {
    id: "FS-202",
    title: "Cooling of cooked food",
    keywords: ["food", "cooling", "temperature", "cooked", "restaurant"],
    text: "Cooked food is cooled from 60 °C to 7 °C within five hours before it is refrigerated.",
  },
  {
    id: "HY-301",
    title: "Hand washing facilities",
    keywords: ["hygiene", "hands", "washing", "staff", "restaurant", "kitchen"],
    text: "Every food preparation area has a hand basin with warm running water, soap and disposable towels.",
  },
  {
    id: "HY-302",
    title: "Cleaning and disinfection schedule",
    keywords: ["hygiene", "cleaning", "disinfection", "kitchen", "restaurant", "surfaces"],
    text: "Food contact surfaces are cleaned and disinfected after each use and following a written schedule.",
  },
  {
    id: "HY-303",
    title: "Pest control",
    keywords: ["hygiene", "pests", "rodents", "insects", "restaurant", "storage"],
    text: "Premises are protected against pests; traps and inspections are logged at least monthly.",
  },
  {
    id: "AL-401",
    title: "Allergen information",
    keywords: ["allergens", "allergy", "labelling", "menu", "restaurant", "information"],
    text: "The fourteen major allergens present in each dish are declared to customers in writing or on request.",
  },
  {
    id: "TR-501",
    title: "Traceability records",
    keywords: ["traceability", "records", "suppliers", "recall", "food"],
    text: "Businesses record the supplier of every ingredient and the customers of every product they supply onward.",
  },
  {
    id: "HA-601",
    title: "HACCP food safety plan",
    keywords: ["haccp", "plan", "hazards", "critical", "control", "food", "safety", "restaurant"],
    text: "Food businesses keep a HACCP-based plan identifying hazards, critical control points and corrective actions.",
  },
  {
    id: "WA-701",
    title: "Drinking water",
    keywords: ["water", "drinking", "ice", "supply", "safety"],
    text: "Water used for food or ice is of drinking water quality; private supplies are tested yearly.",
  },
].map((regulation) => Object.freeze(regulation)));

const STOPWORDS = new Set([
  "the", "and", "for", "are", "what", "which", "with", "about", "regulations", "regulation",
  "rules", "rule", "from", "that", "this", "there", "their", "please", "me", "of", "on", "in",
]);

const utf8 = new TextEncoder();

// Whether `c` (one code point) falls in flat [first, last, …] `ranges`.
function inRanges(ranges, c) {
  const point = c.codePointAt(0);
  let low = 0;
  let high = ranges.length / 2;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (point < ranges[2 * middle]) high = middle;
    else if (point > ranges[2 * middle + 1]) low = middle + 1;
    else return true;
  }
  return false;
}

// Rust's str::split(|c| !c.is_alphanumeric()): JavaScript's \W is ASCII only.
function words(text) {
  const words = [""];
  for (const c of text) {
    if (inRanges(ALPHANUMERIC, c)) words[words.length - 1] += c;
    else words.push("");
  }
  return words;
}

// Rust's str::trim: Unicode White_Space (JavaScript's trim() also strips U+FEFF).
const EDGE_WHITESPACE =
  /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g;

function terms(query) {
  const terms = [];
  for (const piece of words(query)) {
    const word = piece.toLowerCase();
    // The Rust plugin counts bytes of UTF-8, not UTF-16 units.
    if (utf8.encode(word).length < 3 || STOPWORDS.has(word)) continue;
    const term = word.replace(/s+$/, "");
    // Only consecutive repeats are dropped (Vec::dedup).
    if (terms[terms.length - 1] !== term) terms.push(term);
  }
  return terms;
}

function score(regulation, terms) {
  const title = regulation.title.toLowerCase();
  const text = regulation.text.toLowerCase();
  let total = 0;
  for (const term of terms) {
    if (regulation.keywords.some((keyword) => keyword.startsWith(term))) total += 2;
    if (title.includes(term)) total += 1;
    if (text.includes(term)) total += 1;
  }
  return total;
}

function search(rawQuery, limit) {
  const query = rawQuery.replace(EDGE_WHITESPACE, "");
  if (query === "") throw 'the query is empty: name a topic, e.g. "food storage"';
  if ([...query].length > 500) throw "the query is longer than 500 characters";
  const queryTerms = terms(query);
  const ranked = REGULATIONS.map((regulation) => [score(regulation, queryTerms), regulation])
    .filter(([points]) => points > 0)
    .sort((a, b) => b[0] - a[0] || (a[1].id < b[1].id ? -1 : a[1].id > b[1].id ? 1 : 0));
  const total = ranked.length;
  return {
    count: total,
    query,
    results: ranked
      .slice(0, limit)
      .map(([points, r]) => ({ id: r.id, score: points, text: r.text, title: r.title })),
    summary: `Found ${total} relevant regulation${total === 1 ? "" : "s"}`,
  };
}

// FNV-1a over UTF-8 bytes, in u32 arithmetic: the Rust plugin's report fingerprint.
function fnv1a(text) {
  let hash = 0x811c9dc5;
  for (const byte of utf8.encode(text)) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
  return hash;
}

const rotateLeft = (value, bits) => (bits === 0 ? value : ((value << bits) | (value >>> (32 - bits))) >>> 0);

const INSPECTION_ID = /^INS-[0-9]{4}-[0-9]{1,6}$/;

// A string as Rust's `{:?}` prints it, so error messages match the Rust plugin's.
const ESCAPES = { '"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0" };

function rustDebug(text) {
  let out = '"';
  for (const c of text) {
    if (Object.hasOwn(ESCAPES, c)) out += ESCAPES[c];
    else if (c !== " " && inRanges(UNPRINTABLE, c)) out += `\\u{${c.codePointAt(0).toString(16)}}`;
    else out += c;
  }
  return `${out}"`;
}

function draftReport(inspectionId, notes) {
  if (!INSPECTION_ID.test(inspectionId)) {
    throw `${rustDebug(inspectionId)} is not an inspection id like INS-2024-001`;
  }
  const fingerprint = fnv1a(inspectionId);
  // Each inspection checks three regulations, chosen by its id (u32 sums wrap as on wasm32).
  const findings = [0, 1, 2].map((i) => {
    const at = ((rotateLeft(fingerprint, i * 11) + i * 5) >>> 0) % REGULATIONS.length;
    const regulation = REGULATIONS[at];
    const compliant = ((fingerprint >>> (i + 3)) & 1) === 0;
    return {
      outcome: compliant ? "compliant" : "non-compliant",
      regulation: regulation.id,
      title: regulation.title,
    };
  });
  const violations = findings.filter((f) => f.outcome === "non-compliant").length;
  const reportId = `RPT-${inspectionId.slice(4)}-${fingerprint.toString(16).toUpperCase().padStart(8, "0")}`;
  return {
    findings,
    inspection_id: inspectionId,
    notes: notes ?? "",
    report_id: reportId,
    status: "generated",
    summary: `Generated report ${reportId} for ${inspectionId}: ${violations} of 3 checks non-compliant`,
    violations,
  };
}

// The Rust plugin's argument structs, read as serde reads them.
const SEARCH_ARGUMENTS = { query: optional(string), limit: optional(count) };
const REPORT_ARGUMENTS = { inspection_id: optional(string), notes: optional(string) };

function searchRegulations(argumentsText) {
  const args = toolArguments(argumentsText, SEARCH_ARGUMENTS);
  const limit = Math.min(10, Math.max(1, args.limit ?? 5));
  return search(args.query ?? "", limit);
}

function generateInspectionReport(argumentsText) {
  const args = toolArguments(argumentsText, REPORT_ARGUMENTS);
  const id = args.inspection_id ?? "";
  const notes = args.notes === undefined ? undefined : [...args.notes].slice(0, 2000).join("");
  const report = draftReport(id, notes);
  try {
    kvSetJson(`report:${id}`, { report, stored_at_ms: Number(nowMs()) });
  } catch (error) {
    throw `the report could not be stored: ${error instanceof Error ? error.message : error}`;
  }
  return report;
}

const SEARCH_PARAMETERS =
  '{"type":"object","properties":{"query":{"type":"string","minLength":1,"maxLength":500},"limit":{"type":"integer","minimum":1,"maximum":10}},"required":["query"]}';
const REPORT_PARAMETERS =
  '{"type":"object","properties":{"inspection_id":{"type":"string","pattern":"^INS-[0-9]{4}-[0-9]{1,6}$"},"notes":{"type":"string","maxLength":2000}},"required":["inspection_id"]}';

export function manifest() {
  return manifestOf({
    name: "js-inspection-tools",
    version: "0.1.0",
    description: "Regulation search and inspection reports for the HAI assistant, in JavaScript",
    tools: [
      {
        name: "search_regulations",
        description: "Searches the bundled food-safety regulations by keyword",
        parameters: SEARCH_PARAMETERS,
        risk: "low",
      },
      {
        name: "generate_inspection_report",
        description: "Generates the official inspection report, which is stored permanently",
        parameters: REPORT_PARAMETERS,
        risk: "high",
      },
    ],
    instance: { tag: "warm", val: { maxInvocations: 1000, maxConcurrency: 2, idleTimeoutMs: 60000 } },
  });
}

export function handle(_message) {
  throw { kind: "unsupported", message: "js-inspection-tools only offers tools; call them through the host" };
}

export function runTool(name, argumentsText) {
  return dispatchTool(name, argumentsText, {
    search_regulations: searchRegulations,
    generate_inspection_report: generateInspectionReport,
  });
}
