//! `agora-node a2a …`: an A2A 1.0 client on the command line (JSON-RPC
//! binding; see [`crate::peers::a2a`]).
//!
//! `send` prints the answer as it arrives and ends with three lines a script
//! can read to go on: `task: ID`, `context: ID`, `state: STATE`. When the
//! agent stops to ask for an approval, the answer comes from `--approve` /
//! `--reject`, else from the operator on a terminal; with neither, the
//! pending approval is printed and the command exits with
//! [`EXIT_AWAITING_INPUT`], so a script can answer it later with
//! `send URL --task ID --approve`. Any final state but completed exits 1.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use serde_json::Value;

use crate::peers::a2a::{self, Agent, AgentCard, Limits, PendingApproval, SendResult, StreamEvent, Task};

/// The exit status of `send` when the task waits on input the command could not give.
pub const EXIT_AWAITING_INPUT: u8 = 3;

#[derive(Subcommand)]
pub enum Command {
    /// Print an agent's card: name, interfaces, skills.
    Card {
        /// The agent's base URL (its card is at URL/.well-known/agent-card.json).
        url: String,
        /// Print the card as JSON, as served.
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 30)]
        timeout: u64,
    },
    /// Send a message; print the answer, then the task id, context id and state.
    Send {
        /// The agent's base URL (its card is at URL/.well-known/agent-card.json).
        url: String,
        /// The message text. Leave it out to answer a pending approval of --task.
        text: Option<String>,
        /// Stream the answer (SendStreamingMessage) and print it as it arrives.
        #[arg(long)]
        stream: bool,
        /// Continue this context (a conversation the agent remembers).
        #[arg(long)]
        context: Option<String>,
        /// Continue this task.
        #[arg(long)]
        task: Option<String>,
        /// Approve the agent's pending approval without asking.
        #[arg(long, conflicts_with = "reject")]
        approve: bool,
        /// Reject the agent's pending approval without asking.
        #[arg(long)]
        reject: bool,
        /// The reason given with --reject; the agent sees it.
        #[arg(long, requires = "reject")]
        feedback: Option<String>,
        /// Seconds a call may take; while streaming, seconds between two events.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Print a task as JSON (GetTask).
    Get {
        url: String,
        task: String,
        #[arg(long, default_value_t = 30)]
        timeout: u64,
    },
}

/// How a pending approval is answered.
struct Decision {
    approved: bool,
    feedback: Option<String>,
}

const MAX_RESPONSE_BYTES: usize = 16 << 20;

fn limits(timeout: u64) -> Limits {
    Limits {
        timeout: Duration::from_secs(timeout),
        max_response_bytes: MAX_RESPONSE_BYTES,
    }
}

pub async fn run(command: Command) -> Result<ExitCode, String> {
    super::init_outbound_tls()?;
    match command {
        Command::Card { url, json, timeout } => {
            let card_url = a2a::card_url(&url);
            if json {
                let limits = limits(timeout);
                let card: Value = a2a::fetch_card_json(&card_url, limits, None)
                    .await
                    .map_err(|e| e.to_string())?;
                println!("{}", serde_json::to_string_pretty(&card).unwrap_or_default());
            } else {
                let card = a2a::fetch_card(&card_url, limits(timeout), None)
                    .await
                    .map_err(|e| e.to_string())?;
                print_card(&card);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Get { url, task, timeout } => {
            let agent = Agent::resolve(&url, limits(timeout), None)
                .await
                .map_err(|e| e.to_string())?;
            let task = agent.get_task(&task).await.map_err(|e| e.to_string())?;
            println!("{}", serde_json::to_string_pretty(&task).unwrap_or_default());
            Ok(ExitCode::SUCCESS)
        }
        Command::Send {
            url,
            text,
            stream,
            context,
            task,
            approve,
            reject,
            feedback,
            timeout,
        } => {
            let decision = (approve || reject).then_some(Decision {
                approved: approve,
                feedback,
            });
            let agent = Agent::resolve(&url, limits(timeout), None)
                .await
                .map_err(|e| e.to_string())?;
            let session = Session { agent, stream, url };
            session.send(text, task, context, decision).await
        }
    }
}

fn print_card(card: &AgentCard) {
    println!("name: {}", card.name);
    println!("description: {}", card.description);
    println!("version: {}", card.version);
    let used = card.jsonrpc_interface().map(|i| i.url.as_str());
    println!("interfaces:");
    for interface in &card.supported_interfaces {
        let mark = if Some(interface.url.as_str()) == used {
            " (used)"
        } else {
            ""
        };
        println!(
            "  {} {} {}{mark}",
            interface.protocol_binding, interface.protocol_version, interface.url
        );
    }
    let streaming = card.capabilities.get("streaming").and_then(Value::as_bool) == Some(true);
    println!("streaming: {streaming}");
    println!("skills:");
    for skill in &card.skills {
        println!(
            "  {}: {} - {} [{}]",
            skill.id,
            skill.name,
            skill.description,
            skill.tags.join(", ")
        );
    }
}

struct Session {
    agent: Agent,
    stream: bool,
    url: String,
}

/// What one exchange ended with.
#[allow(clippy::large_enum_variant)] // one per exchange; a box would buy nothing
enum Outcome {
    Task(Task),
    Message(a2a::Message),
}

impl Session {
    async fn send(
        &self,
        text: Option<String>,
        task: Option<String>,
        context: Option<String>,
        mut decision: Option<Decision>,
    ) -> Result<ExitCode, String> {
        let mut outcome = match (text, &task) {
            (Some(text), _) => {
                let parts = vec![a2a::text_part(&text)];
                let message = a2a::user_message(parts, task.as_deref(), context.as_deref());
                self.exchange(message).await?
            }
            (None, Some(task)) if decision.is_some() => {
                let task = self.agent.get_task(task).await.map_err(|e| e.to_string())?;
                if task.pending_approval().is_none() {
                    return Err(format!(
                        "task {} is {}, with no approval pending",
                        task.id, task.status.state
                    ));
                }
                Outcome::Task(task)
            }
            _ => return Err("give the message TEXT, or --task ID with --approve or --reject".into()),
        };
        while let Outcome::Task(task) = &outcome {
            let Some(pending) = task.pending_approval() else {
                break;
            };
            print_pending(&pending);
            let answer = match decision.take() {
                Some(decision) => decision,
                None if std::io::stdin().is_terminal() => ask(&pending)?,
                None => break,
            };
            let part =
                a2a::approval_answer(&pending.approval_id, answer.approved, answer.feedback.as_deref());
            let message = a2a::user_message(vec![part], Some(&task.id), Some(&task.context_id));
            outcome = self.exchange(message).await?;
        }
        Ok(self.finish(&outcome))
    }

    /// Send one message and print the answer (as it arrives when streaming).
    async fn exchange(&self, message: Value) -> Result<Outcome, String> {
        if !self.stream {
            let outcome = match self.agent.send(message).await.map_err(|e| e.to_string())? {
                SendResult::Task(task) => Outcome::Task(task),
                SendResult::Message(message) => Outcome::Message(message),
            };
            print_answer(&outcome, false);
            return Ok(outcome);
        }
        let mut events = self.agent.stream(message).await.map_err(|e| e.to_string())?;
        let mut printed = false;
        let mut bare = None;
        let mut stdout = std::io::stdout();
        while let Some(event) = events.next().await.map_err(|e| e.to_string())? {
            match event {
                StreamEvent::ArtifactUpdate(update) => {
                    for text in update.artifact.parts.iter().filter_map(|p| p.text.as_deref()) {
                        print!("{text}");
                        printed |= !text.is_empty();
                    }
                    let _ = stdout.flush();
                }
                StreamEvent::Message(message) => bare = Some(message),
                StreamEvent::Task(_) | StreamEvent::StatusUpdate(_) => {}
            }
        }
        let outcome = match (bare, events.task()) {
            (Some(message), _) => Outcome::Message(message),
            (None, Some(task)) => Outcome::Task(task.clone()),
            (None, None) => return Err("the stream ended before the agent sent anything".into()),
        };
        print_answer(&outcome, printed);
        Ok(outcome)
    }

    /// Print where things stand and choose the exit status.
    fn finish(&self, outcome: &Outcome) -> ExitCode {
        let task = match outcome {
            Outcome::Message(message) => {
                if let Some(context) = message.context_id.as_deref() {
                    println!("context: {context}");
                }
                return ExitCode::SUCCESS;
            }
            Outcome::Task(task) => task,
        };
        println!("task: {}", task.id);
        println!("context: {}", task.context_id);
        println!("state: {}", task.status.state);
        let state = task.status.state.as_str();
        if state == a2a::STATE_COMPLETED {
            ExitCode::SUCCESS
        } else if state == a2a::STATE_INPUT_REQUIRED || state == a2a::STATE_AUTH_REQUIRED {
            if task.pending_approval().is_some() {
                eprintln!(
                    "agora-node: the task waits for an approval; answer it with \
                     `agora-node a2a send {} --task {} --approve` or `--reject [--feedback TEXT]`",
                    self.url, task.id
                );
            } else {
                eprintln!(
                    "agora-node: the task waits for input; answer with `--task {}`",
                    task.id
                );
            }
            ExitCode::from(EXIT_AWAITING_INPUT)
        } else {
            eprintln!("agora-node: the task ended {state}");
            ExitCode::FAILURE
        }
    }
}

/// The answer's text: a task's artifacts (unless already streamed), else its
/// status message; a bare message's text.
fn print_answer(outcome: &Outcome, streamed: bool) {
    let text = match outcome {
        Outcome::Message(message) => message.text(),
        Outcome::Task(_) if streamed => String::new(),
        Outcome::Task(task) => {
            let artifacts = task.artifact_text();
            let status = task.status.message.as_ref().map(|m| m.text()).unwrap_or_default();
            // An approval question is printed with the approval itself.
            if !artifacts.is_empty() || task.pending_approval().is_some() {
                artifacts
            } else {
                status
            }
        }
    };
    if streamed || !text.is_empty() {
        println!("{text}");
    }
}

fn print_pending(pending: &PendingApproval) {
    let field = |name: &str| match pending.details.get(name) {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    println!("approval needed: {}", pending.question);
    println!("  tool: {}", field("tool_name"));
    println!("  risk: {}", field("risk_level"));
    println!("  parameters: {}", field("parameters"));
    println!("  description: {}", field("description"));
    println!("  approval_id: {}", pending.approval_id);
}

/// Ask the operator on the terminal: y/n, and feedback for a rejection.
fn ask(pending: &PendingApproval) -> Result<Decision, String> {
    let stdin = std::io::stdin();
    let read = || -> Result<String, String> {
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match stdin.lock().read_line(&mut line) {
            Ok(0) => Err("no answer to the approval (end of input)".into()),
            Ok(_) => Ok(line.trim().to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    let tool = pending
        .details
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or("the tool");
    loop {
        eprint!("approve {tool}? [y/n] ");
        match read()?.to_ascii_lowercase().as_str() {
            "y" | "yes" => {
                return Ok(Decision {
                    approved: true,
                    feedback: None,
                });
            }
            "n" | "no" => {
                eprint!("feedback for the agent (optional): ");
                let feedback = read()?;
                return Ok(Decision {
                    approved: false,
                    feedback: (!feedback.is_empty()).then_some(feedback),
                });
            }
            _ => {}
        }
    }
}
