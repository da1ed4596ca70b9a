//! A tool's side of `run-tool`: its arguments read into the struct the tool
//! declares, and its failure as the text the caller gets back after the host's
//! `tool NAME failed: `. The `bad arguments: ` prefix is shared with the
//! JavaScript and Python helpers, so a caller can tell a malformed call from a
//! tool that ran and failed whatever language the tool is written in.

use crate::HostError;

/// The arguments a tool was called with: JSON text, as the caller sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolArguments {
    text: String,
}

impl ToolArguments {
    /// Wrap the JSON text of a call's arguments (the SDK does this for `run_tool`).
    pub fn new(text: impl Into<String>) -> Self {
        ToolArguments { text: text.into() }
    }

    /// The arguments read into `T` (with serde), or a `bad arguments: …`
    /// failure naming the problem.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ToolFailure> {
        serde_json::from_str(&self.text).map_err(ToolFailure::bad_arguments)
    }

    /// The arguments as the JSON text the caller sent.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Why a tool failed, in words for its caller.
///
/// `?` makes one from a [`HostError`] (its message) or from a `String`/`&str`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolFailure {
    message: String,
}

impl ToolFailure {
    /// A failure saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        ToolFailure {
            message: message.into(),
        }
    }

    /// Arguments the tool cannot read: `bad arguments: {problem}`.
    pub fn bad_arguments(problem: impl std::fmt::Display) -> Self {
        Self::new(format!("bad arguments: {problem}"))
    }

    /// A tool this plugin does not offer: `unknown tool "NAME"`.
    pub fn unknown_tool(name: &str) -> Self {
        Self::new(format!("unknown tool {name:?}"))
    }

    /// What the caller is told.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn into_message(self) -> String {
        self.message
    }
}

impl From<String> for ToolFailure {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for ToolFailure {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

impl From<HostError> for ToolFailure {
    fn from(error: HostError) -> Self {
        Self::new(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Search {
        query: String,
        limit: Option<u32>,
    }

    #[test]
    fn arguments_are_read_into_the_tools_struct() {
        let arguments = ToolArguments::new(r#"{"query": "food", "limit": 3, "extra": true}"#);
        let search: Search = arguments.parse().unwrap();
        assert_eq!(
            search,
            Search {
                query: "food".into(),
                limit: Some(3),
            }
        );
    }

    #[test]
    fn arguments_of_the_wrong_shape_are_bad_arguments_naming_the_problem() {
        for (text, problem) in [
            (r#"{"query": 5}"#, "invalid type: integer `5`, expected a string"),
            (r#"{"limit": 1}"#, "missing field `query`"),
            ("not json", "expected ident"),
            (r#"{"query": "q", "limit": -1}"#, "invalid value: integer `-1`"),
        ] {
            let failure = ToolArguments::new(text).parse::<Search>().unwrap_err();
            assert!(
                failure.message().starts_with("bad arguments: ") && failure.message().contains(problem),
                "{text}: {failure}"
            );
        }
    }

    #[test]
    fn a_host_error_in_a_tool_fails_it_with_the_hosts_message() {
        let failure: ToolFailure = HostError::Limit("values are limited to 10 bytes".into()).into();
        assert_eq!(failure.message(), "values are limited to 10 bytes");
        assert_eq!(ToolFailure::unknown_tool("x").message(), "unknown tool \"x\"");
    }
}
