// Serves protocols/unit-conversion.md in JavaScript: a second implementation
// of the document the Rust `unit-converter` plugin serves, built into a
// component for the node's WIT world (plugin-sdk/wit/agora-node.wit) by
// componentize-js. Invalid input is a protocol-level error inside `body`.
// Typed (`npm run check`) by plugin-sdk/bindings/js, whose agora-plugin.js
// helpers gen-document.mjs copies into build/ (the component sees only this folder).

import { log } from "agora:node/host@0.1.0";
import { jsonObject, manifest as manifestOf, unknownTool } from "../build/agora-plugin.js";
import { DOCUMENT } from "../build/document.js";

/** @typedef {import("agora:node/types@0.1.0").Message} Message */
/** @typedef {import("agora:node/types@0.1.0").Manifest} Manifest */

// symbol -> [dimension, factor to the dimension's base unit]; temperature uses offsets.
/** @type {Record<string, [string, number]>} */
const UNITS = {
  m: ["length", 1], km: ["length", 1000], cm: ["length", 0.01], mm: ["length", 0.001],
  mi: ["length", 1609.344], yd: ["length", 0.9144], ft: ["length", 0.3048],
  in: ["length", 0.0254], nmi: ["length", 1852],
  kg: ["mass", 1], g: ["mass", 0.001], mg: ["mass", 0.000001], lb: ["mass", 0.45359237],
  oz: ["mass", 0.028349523125], t: ["mass", 1000],
  C: ["temperature", 1], F: ["temperature", 1], K: ["temperature", 1],
  l: ["volume", 1], ml: ["volume", 0.001], gal: ["volume", 3.785411784],
  qt: ["volume", 0.946352946], pt: ["volume", 0.473176473], cup: ["volume", 0.2365882365],
  floz: ["volume", 0.0295735295625],
  s: ["time", 1], min: ["time", 60], h: ["time", 3600], d: ["time", 86400], wk: ["time", 604800],
  B: ["data", 1], kB: ["data", 1e3], MB: ["data", 1e6], GB: ["data", 1e9],
  KiB: ["data", 1024], MiB: ["data", 1048576], GiB: ["data", 1073741824],
};

/** @param {string} symbol */
function unit(symbol) {
  if (!Object.hasOwn(UNITS, symbol)) throw new Error(`unknown unit ${JSON.stringify(symbol)}`);
  return UNITS[symbol];
}

/** @type {(value: number, symbol: string) => number} */
const toKelvin = (v, s) => (s === "C" ? v + 273.15 : s === "F" ? ((v - 32) * 5) / 9 + 273.15 : v);
/** @type {(kelvin: number, symbol: string) => number} */
const fromKelvin = (k, s) => (s === "C" ? k - 273.15 : s === "F" ? ((k - 273.15) * 9) / 5 + 32 : k);

// 6 significant digits, halves away from zero (as the Rust implementation rounds).
/** @param {number} value */
function round6(value) {
  if (value === 0) return 0;
  const digits = Math.min(300, Math.max(-300, 6 - Math.floor(Math.log10(Math.abs(value))) - 1));
  const scale = Math.pow(10, digits);
  return (Math.sign(value) * Math.round(Math.abs(value) * scale)) / scale;
}

/** @param {number} value @param {string} from @param {string} to */
function convert(value, from, to) {
  if (!Number.isFinite(value)) throw new Error("value must be a finite number");
  const [fromDim, fromFactor] = unit(from);
  const [toDim, toFactor] = unit(to);
  if (fromDim !== toDim) throw new Error(`cannot convert ${from} (${fromDim}) to ${to} (${toDim})`);
  const converted =
    fromDim === "temperature" ? fromKelvin(toKelvin(value, from), to) : (value * fromFactor) / toFactor;
  return round6(converted);
}

/** @param {Record<string, unknown>} request */
function answer(request) {
  const { value, from, to } = request;
  if (typeof value !== "number" || typeof from !== "string" || typeof to !== "string") {
    return { error: 'body must have a number "value" and strings "from" and "to"' };
  }
  try {
    return { value: convert(value, from, to), unit: to, from: { value, unit: from } };
  } catch (error) {
    return { error: error instanceof Error ? error.message : String(error) };
  }
}

/** @returns {Manifest} */
export function manifest() {
  return manifestOf({
    name: "js-unit-converter",
    version: "0.1.0",
    description: "Converts quantities between units (protocols/unit-conversion.md), in JavaScript",
    protocols: [DOCUMENT],
  });
}

/** @param {Message} message @returns {string} */
export function handle(message) {
  const request = jsonObject(message.body);
  const reply = request ? answer(request) : { error: 'body must be an object {"value", "from", "to"}' };
  if (reply.error) log("debug", `rejected a conversion: ${reply.error}`);
  return JSON.stringify(reply);
}

/** @param {string} name @param {string} _arguments @returns {string} */
export function runTool(name, _arguments) {
  throw unknownTool(name);
}
