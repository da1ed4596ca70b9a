//! Serves `protocols/unit-conversion.md`: converts a quantity between units.
//! Invalid input is a protocol-level error, answered inside `body` as the
//! document prescribes. Offers MCP clients the prompt `convert` (`quantity`
//! required, `to` optional), which asks a model to use the `convert_units` tool.

use agora_plugin_sdk::prelude::*;

struct UnitConverter;

mod convert;

use convert::{UNITS, answer};

/// The body as sent, parsed as [`convert::request_of`] takes it.
fn parse_body(body: &str) -> Option<convert::Request> {
    convert::request_of(serde_json::from_str(body).ok()?)
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
