//! The unit converter's logic, shared by the plugin and by bench row 16's
//! `wasmtime serve` component (`bench/plugins/wasmtime-serve-converter`, which
//! includes this file by path), so both answer with the same table, arithmetic,
//! rounding and protocol-level errors.

use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
pub struct Request {
    value: Option<f64>,
    from: Option<String>,
    to: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Dimension {
    Length,
    Mass,
    Temperature,
    Volume,
    Time,
    Data,
}

/// (symbol, dimension, factor to the dimension's base unit). Temperature uses offsets below.
pub const UNITS: &[(&str, Dimension, f64)] = &[
    ("m", Dimension::Length, 1.0),
    ("km", Dimension::Length, 1000.0),
    ("cm", Dimension::Length, 0.01),
    ("mm", Dimension::Length, 0.001),
    ("mi", Dimension::Length, 1609.344),
    ("yd", Dimension::Length, 0.9144),
    ("ft", Dimension::Length, 0.3048),
    ("in", Dimension::Length, 0.0254),
    ("nmi", Dimension::Length, 1852.0),
    ("kg", Dimension::Mass, 1.0),
    ("g", Dimension::Mass, 0.001),
    ("mg", Dimension::Mass, 0.000001),
    ("lb", Dimension::Mass, 0.45359237),
    ("oz", Dimension::Mass, 0.028349523125),
    ("t", Dimension::Mass, 1000.0),
    ("C", Dimension::Temperature, 1.0),
    ("F", Dimension::Temperature, 1.0),
    ("K", Dimension::Temperature, 1.0),
    ("l", Dimension::Volume, 1.0),
    ("ml", Dimension::Volume, 0.001),
    ("gal", Dimension::Volume, 3.785411784),
    ("qt", Dimension::Volume, 0.946352946),
    ("pt", Dimension::Volume, 0.473176473),
    ("cup", Dimension::Volume, 0.2365882365),
    ("floz", Dimension::Volume, 0.0295735295625),
    ("s", Dimension::Time, 1.0),
    ("min", Dimension::Time, 60.0),
    ("h", Dimension::Time, 3600.0),
    ("d", Dimension::Time, 86400.0),
    ("wk", Dimension::Time, 604800.0),
    ("B", Dimension::Data, 1.0),
    ("kB", Dimension::Data, 1e3),
    ("MB", Dimension::Data, 1e6),
    ("GB", Dimension::Data, 1e9),
    ("KiB", Dimension::Data, 1024.0),
    ("MiB", Dimension::Data, 1048576.0),
    ("GiB", Dimension::Data, 1073741824.0),
];

fn unit(symbol: &str) -> Result<(Dimension, f64), String> {
    UNITS
        .iter()
        .find(|(s, _, _)| *s == symbol)
        .map(|(_, d, f)| (*d, *f))
        .ok_or_else(|| format!("unknown unit {symbol:?}"))
}

fn to_kelvin(value: f64, symbol: &str) -> f64 {
    match symbol {
        "C" => value + 273.15,
        "F" => (value - 32.0) * 5.0 / 9.0 + 273.15,
        _ => value,
    }
}

fn from_kelvin(kelvin: f64, symbol: &str) -> f64 {
    match symbol {
        "C" => kelvin - 273.15,
        "F" => (kelvin - 273.15) * 9.0 / 5.0 + 32.0,
        _ => kelvin,
    }
}

fn round6(value: f64) -> f64 {
    if value == 0.0 {
        return 0.0;
    }
    let digits = 6 - value.abs().log10().floor() as i32 - 1;
    let scale = 10f64.powi(digits.clamp(-300, 300));
    (value * scale).round() / scale
}

pub fn convert(value: f64, from: &str, to: &str) -> Result<f64, String> {
    if !value.is_finite() {
        return Err("value must be a finite number".into());
    }
    let (from_dim, from_factor) = unit(from)?;
    let (to_dim, to_factor) = unit(to)?;
    if from_dim != to_dim {
        return Err(format!(
            "cannot convert {from} ({from_dim:?}) to {to} ({to_dim:?})"
        ));
    }
    let converted = if from_dim == Dimension::Temperature {
        from_kelvin(to_kelvin(value, from), to)
    } else {
        value * from_factor / to_factor
    };
    Ok(round6(converted))
}

pub fn answer(request: Request) -> Value {
    let (Some(value), Some(from), Some(to)) = (request.value, request.from, request.to) else {
        return json!({"error": "body must have a number \"value\" and strings \"from\" and \"to\""});
    };
    match convert(value, &from, &to) {
        Ok(converted) => {
            json!({"value": converted, "unit": to, "from": {"value": value, "unit": from}})
        }
        Err(error) => json!({"error": error}),
    }
}

/// The body as an object, or a string holding one: agora-protocol 0.2.0 sends
/// every body as a string, so a structured query arrives as JSON text.
pub fn request_of(body: Value) -> Option<Request> {
    match body {
        Value::String(inner) => serde_json::from_str(&inner).ok(),
        object @ Value::Object(_) => serde_json::from_value(object).ok(),
        _ => None,
    }
}
