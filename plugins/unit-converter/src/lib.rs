//! Serves `protocols/unit-conversion.md`: converts a quantity between units.
//! Invalid input is a protocol-level error, answered inside `body` as the
//! document prescribes. Offers MCP clients the prompt `convert` (`quantity`
//! required, `to` optional), which asks a model to use the `convert_units` tool.

use agora_plugin_sdk::prelude::*;

struct UnitConverter;

#[derive(Deserialize)]
struct Request {
    value: Option<f64>,
    from: Option<String>,
    to: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Dimension {
    Length,
    Mass,
    Temperature,
    Volume,
    Time,
    Data,
}

/// (symbol, dimension, factor to the dimension's base unit). Temperature uses offsets below.
const UNITS: &[(&str, Dimension, f64)] = &[
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

fn answer(request: Request) -> Value {
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
fn parse_body(body: &str) -> Option<Request> {
    match serde_json::from_str::<Value>(body).ok()? {
        Value::String(inner) => serde_json::from_str(&inner).ok(),
        object @ Value::Object(_) => serde_json::from_value(object).ok(),
        _ => None,
    }
}

impl Plugin for UnitConverter {
    fn manifest() -> Manifest {
        Manifest::new("unit-converter", env!("CARGO_PKG_VERSION"))
            .description("Converts quantities between units (protocols/unit-conversion.md)")
            .protocol(include_str!("../../../protocols/unit-conversion.md"))
            .tool(
                "convert_units",
                "Convert a quantity between units of one dimension",
                r#"{"type":"object","x-read-only":true,"properties":{"value":{"type":"number"},"from":{"type":"string"},"to":{"type":"string"}},"required":["value","from","to"]}"#,
                Risk::Low,
            )
    }

    fn handle(message: Message) -> Result<String, Failure> {
        // A body that is not even an object is still a protocol-level error (spec §10.3).
        let reply_body = match parse_body(&message.body) {
            Some(request) => answer(request),
            None => json!({"error": "body must be an object {\"value\", \"from\", \"to\"}"}),
        };
        reply(reply_body)
    }

    fn capabilities() -> Capabilities {
        Capabilities::new().prompt(
            Prompt::new(
                "convert",
                "Ask for a quantity in other units, with the convert_units tool.",
            )
            .argument("quantity", "What to convert, with its unit: \"3.5 mi\"", true)
            .argument(
                "to",
                "The unit wanted (else the model picks the usual ones)",
                false,
            ),
        )
    }

    fn get_prompt(name: String, arguments: PromptArguments) -> Result<RenderedPrompt, String> {
        if name != "convert" {
            return Err(format!("no prompt named {name:?}"));
        }
        let quantity = arguments.get("quantity").map(String::as_str).unwrap_or_default();
        let target = match arguments.get("to") {
            Some(to) => format!("to {to}"),
            None => "to the units people usually want for it".to_string(),
        };
        let units: Vec<&str> = UNITS.iter().map(|(symbol, ..)| *symbol).collect();
        Ok(RenderedPrompt::new()
            .description(format!("Convert {quantity}"))
            .user(format!(
                "Convert {quantity} {target}. Use the convert_units tool (units: {}) rather than \
                 arithmetic of your own, and give the result with its unit.",
                units.join(", ")
            )))
    }

    fn run_tool(name: String, arguments: ToolArguments) -> Result<String, ToolFailure> {
        if name != "convert_units" {
            return Err(ToolFailure::unknown_tool(&name));
        }
        let result = answer(arguments.parse()?);
        if let Some(error) = result.get("error") {
            return Err(ToolFailure::new(error.to_string()));
        }
        Ok(result.to_string())
    }
}

export_plugin!(UnitConverter);
