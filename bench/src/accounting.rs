//! Where a row's node CPU goes, per request, and what the node would do with
//! its own code at zero (issue 42; issue 21's "tenth step", made part of the
//! harness instead of a manual profile).
//!
//! After a row's alternation, [`profile`] runs one more closed-loop segment on
//! the node alone while `perf record` samples it (250 Hz, DWARF call graphs),
//! reads the node's CPU time per request in that segment (T), and puts every
//! sample in exactly one [`Group`] by a small table of rules, in this order:
//!
//! 1. the floor's own work if ANY frame is the floor's (the row passes the
//!    patterns: what `floor.rs` runs, in the node's function names);
//! 2. otherwise by its kernel entry: a socket write or read, `fdatasync` (the
//!    durable journal), the `PAGEMAP_SCAN` ioctl (the fresh instance), and
//!    waits, wake-ups, the scheduler and its interrupts;
//! 3. otherwise by the first frame, from the leaf up, of a crate the table
//!    lists: wasmtime and cranelift (and the guest's unnamed JIT frames below
//!    them) are the fresh instance; hyper, http, bytes, tokio, mio and std::net
//!    are HTTP; `agora_node::store` and sled are the durable journal (the
//!    replay claims and the journal live in the store; the group commit's
//!    `fdatasync` is rule 2); the rest of `agora_node`, axum, tower,
//!    tower_http, tracing, metrics, serde and serde_json are ours. A crate the
//!    table does not list (hashbrown, uuid, base64, …) is passed over, so its
//!    cost goes to whichever listed crate called it; named frames with no
//!    listed crate anywhere are "other", kept apart from ours;
//! 4. a sample with no named frame at all (malloc, free, memcpy with nothing
//!    named above them, `[unknown]`) is unattributed.
//!
//! Each group costs T × its share of the samples. The stack bound is what the
//! node would do with ours and the unattributed rest at zero. perf's own
//! overhead swells T in the profiled segment (by 4–29 % against the same
//! row's unprofiled alternation, in the runs of issue 42), so the bound is
//! taken from the profile's proportions, not its absolute µs: the node's
//! measured share of its comparison ÷ the stack's fraction of T, (T − ours −
//! unattributed) ÷ T. A row meets its target when it is at least 90 % of that
//! bound, which is when the stack is at least 90 % of the node's CPU. perf
//! missing or failing leaves the row's measurements as they are and its
//! status "not measured": a profile is never a reason to lose a run.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::load::{self, Target};
use crate::procs::Server;
use crate::report::verdict;
use crate::settings::Settings;

/// Debian's `linux-perf` (bench/run installs it when missing).
const PERF: &str = "perf";
const FREQUENCY_HZ: u32 = 250;
/// DWARF call graphs make `perf script` slow; more samples than this add little.
const LONGEST_PROFILE: Duration = Duration::from_secs(10);
/// Few samples say little; a smoke run still profiles for this long.
const SHORTEST_PROFILE: Duration = Duration::from_secs(1);
/// Request numbers of the profile's segments, far from the alternation's.
const PROFILE_SEQ: u64 = 1 << 62;
/// A row meets its target at this fraction of its stack bound.
const OF_BOUND: f64 = 0.9;

/// Where one sample's CPU went. Every sample is in exactly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Group {
    Floor,
    SocketWrite,
    SocketRead,
    WakeUps,
    Http,
    FreshInstance,
    DurableJournal,
    Ours,
    Other,
    Unattributed,
}

impl Group {
    const ALL: [Group; 10] = [
        Group::Floor,
        Group::SocketWrite,
        Group::SocketRead,
        Group::WakeUps,
        Group::Http,
        Group::FreshInstance,
        Group::DurableJournal,
        Group::Ours,
        Group::Other,
        Group::Unattributed,
    ];

    fn key(self) -> &'static str {
        match self {
            Group::Floor => "floor",
            Group::SocketWrite => "http_kernel_socket_write",
            Group::SocketRead => "http_kernel_socket_read",
            Group::WakeUps => "http_kernel_wake_ups",
            Group::Http => "http",
            Group::FreshInstance => "fresh_instance",
            Group::DurableJournal => "durable_journal",
            Group::Ours => "ours",
            Group::Other => "other",
            Group::Unattributed => "unattributed",
        }
    }
}

/// Crates by the group their frames go to (rule 3); a crate named by its
/// first path segment, a prefix ending in `_` standing for a family.
const CRATE_GROUPS: &[(Group, &[&str])] = &[
    (Group::DurableJournal, &["sled"]),
    (
        Group::FreshInstance,
        &["wasmtime", "wasmtime_", "cranelift", "cranelift_", "wasmparser"],
    ),
    (
        Group::Http,
        &[
            "hyper",
            "hyper_util",
            "http",
            "http_body",
            "http_body_util",
            "httparse",
            "bytes",
            "tokio",
            "tokio_util",
            "mio",
            "want",
        ],
    ),
    (
        Group::Ours,
        &[
            "agora_node",
            "axum",
            "axum_core",
            "tower",
            "tower_layer",
            "tower_service",
            "tower_http",
            "tracing",
            "tracing_",
            "metrics",
            "metrics_",
            "serde",
            "serde_json",
            "matchit",
        ],
    ),
];

/// Paths inside a listed crate that go to another group than the crate's.
const PATH_GROUPS: &[(&str, Group)] = &[
    ("agora_node::store::", Group::DurableJournal),
    ("std::net::", Group::Http),
    ("std::sys::net::", Group::Http),
];

/// One frame of a sample, as `perf script` printed it, demangled.
#[derive(Debug, Clone)]
struct Frame {
    symbol: String,
    dso: String,
}

impl Frame {
    fn is_kernel(&self) -> bool {
        self.dso.starts_with("[kernel")
    }

    /// A kernel symbol without the compiler's `.isra.0`/`.constprop.0` suffixes.
    fn kernel_name(&self) -> &str {
        self.symbol.split('.').next().unwrap_or_default()
    }
}

/// One sample's frames, leaf first.
#[derive(Debug, Default)]
struct Sample {
    frames: Vec<Frame>,
}

/// The samples of `perf script -F comm,tid,ip,sym,dso` output: a header line
/// per sample, then its frames indented, leaf first, then a blank line.
fn parse_script(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut current: Option<Sample> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            samples.extend(current.take());
        } else if line.starts_with(char::is_whitespace) {
            if let Some(frame) = parse_frame(line) {
                current.get_or_insert_with(Sample::default).frames.push(frame);
            }
        } else {
            samples.extend(current.replace(Sample::default()));
        }
    }
    samples.extend(current);
    samples.retain(|s| !s.frames.is_empty());
    samples
}

/// `\t    55d0c1a2b3c4 _ZN10agora_node…E+0x1c (/path/agora-node)`.
fn parse_frame(line: &str) -> Option<Frame> {
    let (_address, rest) = line.trim().split_once(char::is_whitespace)?;
    let rest = rest.trim();
    let (symbol, dso) = match rest.rfind(" (") {
        Some(at) if rest.ends_with(')') => (&rest[..at], &rest[at + 2..rest.len() - 1]),
        _ => (rest, ""),
    };
    let symbol = match symbol.rfind("+0x") {
        Some(at) if symbol[at + 3..].bytes().all(|b| b.is_ascii_hexdigit()) => &symbol[..at],
        _ => symbol,
    };
    Some(Frame {
        symbol: demangle(symbol),
        dso: dso.to_string(),
    })
}

/// Rust symbols (legacy `_ZN…E` or v0 `_R…`) demangled without their hash;
/// anything else (C, the kernel) as it is.
fn demangle(symbol: &str) -> String {
    match rustc_demangle::try_demangle(symbol) {
        Ok(demangled) => format!("{demangled:#}"),
        Err(_) => symbol.to_string(),
    }
}

/// A function's path without generic arguments: `<alloc::vec::Vec<u8> as
/// core::ops::drop::Drop>::drop` → `<alloc::vec::Vec as core::ops::drop::Drop>::drop`.
fn without_generics(symbol: &str) -> String {
    let mut out = String::with_capacity(symbol.len());
    let mut depth = 0usize;
    let mut previous = ' ';
    for c in symbol.chars() {
        if depth > 0 {
            match c {
                '<' => depth += 1,
                '>' if previous != '-' => depth -= 1,
                _ => {}
            }
        } else if c == '<' && (previous.is_alphanumeric() || previous == '_' || previous == ':') {
            depth = 1;
        } else {
            out.push(c);
        }
        previous = c;
    }
    out.replace("::::", "::").trim_end_matches("::").to_string()
}

/// The path a frame's code belongs to: its own path, or for a trait method
/// `<T as Trait>::f` the path of T (or of the trait when T is a std type).
fn owning_path(symbol: &str) -> &str {
    let Some(qualified) = symbol.strip_prefix('<') else {
        return symbol;
    };
    let self_type = qualified
        .trim_start_matches(['&', '*', '[', '('])
        .trim_start_matches("mut ")
        .trim_start_matches("const ")
        .trim_start_matches("dyn ");
    let is_std = ["core::", "alloc::", "std::"]
        .iter()
        .any(|p| self_type.starts_with(p));
    match qualified.find(" as ") {
        Some(at) if is_std && !self_type.starts_with("std::net::") => &qualified[at + 4..],
        _ => self_type,
    }
}

/// Rule 3's group of one frame, if its crate (or path) is listed.
fn frame_group(symbol: &str) -> Option<Group> {
    let path = owning_path(symbol);
    if let Some((_, group)) = PATH_GROUPS.iter().find(|(prefix, _)| path.starts_with(prefix)) {
        return Some(*group);
    }
    let (krate, _) = path.split_once("::")?;
    CRATE_GROUPS.iter().find_map(|(group, crates)| {
        crates
            .iter()
            .any(|c| krate == *c || (c.ends_with('_') && krate.starts_with(c)))
            .then_some(*group)
    })
}

/// Rule 2: the group a sample's kernel entry decides, if it decides one.
fn kernel_group(kernel: &[&Frame]) -> Option<Group> {
    let has = |prefixes: &[&str]| {
        kernel
            .iter()
            .any(|f| prefixes.iter().any(|p| f.kernel_name().starts_with(p)))
    };
    let syscall = kernel.iter().find_map(|f| {
        let name = f.kernel_name();
        ["__x64_sys_", "__ia32_sys_", "__do_sys_"]
            .iter()
            .find_map(|p| name.strip_prefix(p))
    });
    let socket = has(&[
        "sock_",
        "tcp_",
        "inet_",
        "__sys_sendto",
        "__sys_recvfrom",
        "__sys_sendmsg",
    ]);
    let decided = match syscall {
        Some("write" | "writev" | "sendto" | "sendmsg" | "sendmmsg") if socket => Some(Group::SocketWrite),
        Some("read" | "readv" | "recvfrom" | "recvmsg" | "recvmmsg") if socket => Some(Group::SocketRead),
        Some("fdatasync" | "fsync" | "sync_file_range") => Some(Group::DurableJournal),
        Some("ioctl") if has(&["do_pagemap_scan", "pagemap_scan"]) => Some(Group::FreshInstance),
        Some(
            "futex" | "epoll_wait" | "epoll_pwait" | "epoll_pwait2" | "sched_yield" | "nanosleep"
            | "clock_nanosleep",
        ) => Some(Group::WakeUps),
        _ => None,
    };
    decided.or_else(|| {
        has(&[
            "schedule",
            "__schedule",
            "finish_task_switch",
            "try_to_wake_up",
            "asm_sysvec_",
            "irqentry_exit",
        ])
        .then_some(Group::WakeUps)
    })
}

/// A sample's group, and for "ours" the leaf-most frame of ours (without generics).
fn classify(sample: &Sample, floor: &[&str]) -> (Group, Option<String>) {
    if sample
        .frames
        .iter()
        .any(|f| floor.iter().any(|pattern| f.symbol.contains(pattern)))
    {
        return (Group::Floor, None);
    }
    let kernel: Vec<&Frame> = sample.frames.iter().take_while(|f| f.is_kernel()).collect();
    if let Some(group) = kernel_group(&kernel) {
        return (group, None);
    }
    let mut named = false;
    for frame in &sample.frames[kernel.len()..] {
        let symbol = without_generics(&frame.symbol);
        if let Some(group) = frame_group(&symbol) {
            return (group, (group == Group::Ours).then_some(symbol));
        }
        named |= symbol.contains("::");
    }
    (if named { Group::Other } else { Group::Unattributed }, None)
}

/// Samples per group, and per leaf-most function of ours.
#[derive(Debug, Default)]
struct Tally {
    samples: usize,
    groups: HashMap<Group, usize>,
    ours: HashMap<String, usize>,
}

fn tally(samples: &[Sample], floor: &[&str]) -> Tally {
    let mut tally = Tally::default();
    for sample in samples {
        let (group, function) = classify(sample, floor);
        tally.samples += 1;
        *tally.groups.entry(group).or_default() += 1;
        if let Some(function) = function {
            *tally.ours.entry(function).or_default() += 1;
        }
    }
    tally
}

/// One profile of the node under a row's load, and what it costs per request.
#[derive(Debug)]
pub(crate) struct Accounting {
    /// The node's CPU per request in the profiled segment, µs (T).
    t_us: f64,
    tally: Tally,
    requests: u64,
    failed: u64,
    node_cpu_seconds: f64,
    perf_command: String,
    script_seconds: f64,
    parse_seconds: f64,
}

impl Accounting {
    fn us(&self, group: Group) -> f64 {
        let samples = self.tally.groups.get(&group).copied().unwrap_or(0);
        self.t_us * samples as f64 / self.tally.samples.max(1) as f64
    }

    /// The fraction of the node's CPU that is neither ours nor unattributed:
    /// what is left of a request with our own code at zero.
    fn stack_fraction(&self) -> f64 {
        ((self.t_us - self.us(Group::Ours) - self.us(Group::Unattributed)) / self.t_us.max(1e-9))
            .clamp(1e-9, 1.0)
    }

    /// Our functions by µs per request, most first.
    fn top_ours(&self, count: usize) -> Vec<(&str, f64)> {
        let mut ours: Vec<(&str, usize)> = self.tally.ours.iter().map(|(f, n)| (f.as_str(), *n)).collect();
        ours.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let per_sample = self.t_us / self.tally.samples.max(1) as f64;
        ours.into_iter()
            .take(count)
            .map(|(f, n)| (f, n as f64 * per_sample))
            .collect()
    }

    fn json(&self) -> Value {
        let groups: serde_json::Map<String, Value> = Group::ALL
            .iter()
            .map(|g| (g.key().to_string(), json!(self.us(*g))))
            .collect();
        let samples: serde_json::Map<String, Value> = Group::ALL
            .iter()
            .map(|g| {
                (
                    g.key().to_string(),
                    json!(self.tally.groups.get(g).copied().unwrap_or(0)),
                )
            })
            .collect();
        json!({
            "node_cpu_us_per_request": self.t_us,
            "us_per_request": groups,
            "samples": self.tally.samples,
            "samples_per_group": samples,
            "requests": self.requests, "failed": self.failed,
            "node_cpu_seconds": self.node_cpu_seconds,
            "stack_fraction": self.stack_fraction(),
            "top_ours_us_per_request": self.top_ours(10).iter()
                .map(|(f, us)| json!({"function": f, "us": us})).collect::<Vec<_>>(),
            "perf_command": self.perf_command,
            "perf_script_seconds": self.script_seconds,
            "parse_seconds": self.parse_seconds,
        })
    }
}

/// Profile the node under `target`'s load: one closed-loop segment after a
/// warm-up, `perf record` attached for its length. `floor` are the patterns of
/// the row's floor, matched as substrings of demangled frames.
pub(crate) async fn profile(
    settings: &Settings,
    target: &Target,
    node: &Server,
    floor: &[&str],
) -> Result<Accounting> {
    let seconds = settings.duration.clamp(SHORTEST_PROFILE, LONGEST_PROFILE);
    let scratch = crate::fixture::temp_dir()?;
    let data = scratch.path().join("perf.data");
    load::closed_loop(
        target,
        settings.connections,
        Duration::ZERO,
        settings.warmup,
        PROFILE_SEQ,
    )
    .await;
    let record_args = record_args(node.pid(), &data, seconds);
    let recorder = Command::new(PERF)
        .args(&record_args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => anyhow::anyhow!("perf is not installed (Debian: linux-perf)"),
            _ => anyhow::Error::new(e).context("starting perf record"),
        })?;
    let cpu_before = node.cpu_seconds();
    let measured = load::closed_loop(
        target,
        settings.connections,
        Duration::ZERO,
        seconds,
        PROFILE_SEQ + (1 << 32),
    )
    .await;
    let node_cpu_seconds = node.cpu_seconds() - cpu_before;
    let recorded = tokio::task::spawn_blocking(move || recorder.wait_with_output())
        .await?
        .context("waiting for perf record")?;
    if !recorded.status.success() {
        bail!(
            "perf record failed ({}): {}",
            recorded.status,
            last_line(&recorded.stderr)
        );
    }
    if measured.ok == 0 {
        bail!("no request succeeded while profiling");
    }
    let started = Instant::now();
    let script_data = data.clone();
    let script = tokio::task::spawn_blocking(move || {
        Command::new(PERF)
            .args([
                "script",
                "--no-inline",
                "--no-demangle",
                "-F",
                "comm,tid,ip,sym,dso",
                "-i",
            ])
            .arg(&script_data)
            .stderr(Stdio::piped())
            .output()
    })
    .await?
    .context("running perf script")?;
    let script_seconds = started.elapsed().as_secs_f64();
    if !script.status.success() {
        bail!(
            "perf script failed ({}): {}",
            script.status,
            last_line(&script.stderr)
        );
    }
    let started = Instant::now();
    let tally = tally(&parse_script(&String::from_utf8_lossy(&script.stdout)), floor);
    let parse_seconds = started.elapsed().as_secs_f64();
    if tally.samples == 0 {
        bail!("perf recorded no samples of the node");
    }
    Ok(Accounting {
        t_us: node_cpu_seconds / measured.ok as f64 * 1e6,
        tally,
        requests: measured.ok,
        failed: measured.failed,
        node_cpu_seconds,
        perf_command: format!("{PERF} {}", record_args.join(" ")),
        script_seconds,
        parse_seconds,
    })
}

fn record_args(pid: u32, data: &Path, seconds: Duration) -> Vec<String> {
    vec![
        "record".into(),
        "-F".into(),
        FREQUENCY_HZ.to_string(),
        "--call-graph".into(),
        "dwarf".into(),
        "-p".into(),
        pid.to_string(),
        "-o".into(),
        data.display().to_string(),
        "--".into(),
        "sleep".into(),
        format!("{:.1}", seconds.as_secs_f64()),
    ]
}

fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_string()
}

/// A row's verdict against its stack bound, and the text it adds to its cells.
pub(crate) struct Judged {
    /// Appended to the row's ratio cell.
    pub(crate) ratio: String,
    /// Appended to the row's node cell.
    pub(crate) node: String,
    pub(crate) status: String,
    pub(crate) raw: Value,
}

/// Judge a row whose node does `share` of its comparison's `comparison`
/// requests per CPU-second (both from its alternation) against the profile's bound.
pub(crate) fn judge(
    settings: &Settings,
    profile: &Result<Accounting>,
    share: f64,
    comparison: f64,
    failed: u64,
) -> Judged {
    match profile {
        Ok(accounting) => {
            let of_bound = accounting.stack_fraction();
            let bound_share = share / of_bound;
            let top = accounting
                .top_ours(3)
                .iter()
                .map(|(f, us)| format!("{f} {us:.1} µs"))
                .collect::<Vec<_>>()
                .join(", ");
            let mut raw = accounting.json();
            raw["comparison_per_cpu_second"] = json!(comparison);
            raw["share"] = json!(share);
            raw["bound_share"] = json!(bound_share);
            raw["share_of_bound"] = json!(of_bound);
            Judged {
                ratio: format!(
                    "; bound {:.0} % (T {:.1} µs, ours {:.1}, unattributed {:.1}), share = {:.0} % of bound",
                    bound_share * 100.0,
                    accounting.t_us,
                    accounting.us(Group::Ours),
                    accounting.us(Group::Unattributed),
                    of_bound * 100.0
                ),
                node: format!("<br>top ours: {top}"),
                status: verdict(settings, of_bound >= OF_BOUND && failed == 0),
                raw,
            }
        }
        Err(error) => Judged {
            ratio: format!("; no profile: {error:#}"),
            node: String::new(),
            status: if settings.smoke {
                verdict(settings, false)
            } else {
                "not measured".into()
            },
            raw: json!({"error": format!("{error:#}"), "share": share, "comparison_per_cpu_second": comparison}),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED25519: &[&str] = &["ed25519", "curve25519", "agora_node::crypto::envelope::"];

    /// Hand-written `perf script -F comm,tid,ip,sym,dso --no-demangle` output:
    /// a socket write, an fdatasync, a floor sample, two of ours (one through
    /// a trait impl with generics), a guest sample under wasmtime, hyper, a
    /// malloc with nothing named above it, and a futex wait.
    const SCRIPT: &str = "\
agora-node  4242 
\tffffffff81c1 tcp_sendmsg+0x2c ([kernel.kallsyms])
\tffffffff81c2 sock_write_iter+0x90 ([kernel.kallsyms])
\tffffffff81c3 __x64_sys_write+0x19 ([kernel.kallsyms])
\tffffffff81c4 entry_SYSCALL_64_after_hwframe+0x76 ([kernel.kallsyms])
\t55d0c1a2b3c4 _ZN5hyper5proto2h110dispatcher17h0123456789abcdefE+0x1c (/bin/agora-node)

agora-node  4243 
\tffffffff81d1 ext4_sync_file+0x2c ([kernel.kallsyms])
\tffffffff81d2 __x64_sys_fdatasync.cold+0x9 ([kernel.kallsyms])
\t55d0c1a2b3c5 fdatasync+0x10 (/usr/lib/x86_64-linux-gnu/libc.so.6)

agora-node  4244 
\t55d0c1a2b3c6 _ZN15curve25519_dalek6scalar3mul17h0123456789abcdefE+0x1 (/bin/agora-node)
\t55d0c1a2b3c7 _ZN10agora_node7metrics14record_request17h0123456789abcdefE+0x1 (/bin/agora-node)

agora-node  4244 
\t55d0c1a2b3c8 mi_malloc+0x12 (/bin/agora-node)
\t55d0c1a2b3c9 _ZN10agora_node7metrics14record_request17h0123456789abcdefE+0x1 (/bin/agora-node)
\t55d0c1a2b3ca _ZN5tokio7runtime4task3run17h0123456789abcdefE+0x1 (/bin/agora-node)

agora-node  4244 
\t55d0c1a2b3cb _ZN81_$LT$serde_json..de..Deserializer$LT$R$GT$$u20$as$u20$serde..de..Deserializer$GT$15deserialize_any17h0123456789abcdefE+0x1 (/bin/agora-node)

agora-node  4245 
\t7f0000001000 [unknown] ([unknown])
\t55d0c1a2b3cc _ZN8wasmtime7runtime4func4call17h0123456789abcdefE+0x1 (/bin/agora-node)

agora-node  4245 
\t55d0c1a2b3cd _ZN5hyper5proto2h14role5parse17h0123456789abcdefE+0x1 (/bin/agora-node)

agora-node  4245 
\t7f00000020a0 __memmove_avx_unaligned_erms+0x2 (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t7f00000020a1 [unknown] ([unknown])

agora-node  4246 
\tffffffff81e1 finish_task_switch.isra.0+0x9 ([kernel.kallsyms])
\tffffffff81e2 __schedule+0x2c ([kernel.kallsyms])
\tffffffff81e3 futex_wait+0x1 ([kernel.kallsyms])
\tffffffff81e4 __x64_sys_futex+0x1 ([kernel.kallsyms])
\t7f00000030a0 syscall+0x1 (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t55d0c1a2b3ce _ZN5tokio7runtime4park4park17h0123456789abcdefE+0x1 (/bin/agora-node)
";

    fn groups() -> Vec<Group> {
        parse_script(SCRIPT)
            .iter()
            .map(|s| classify(s, ED25519).0)
            .collect()
    }

    #[test]
    fn accounting_parses_and_demangles_frames() {
        let samples = parse_script(SCRIPT);
        assert_eq!(samples.len(), 9);
        assert_eq!(samples[0].frames.len(), 5);
        assert_eq!(samples[0].frames[4].symbol, "hyper::proto::h1::dispatcher");
        assert_eq!(samples[0].frames[4].dso, "/bin/agora-node");
        assert_eq!(samples[5].frames[0].symbol, "[unknown]");
        assert_eq!(samples[1].frames[1].kernel_name(), "__x64_sys_fdatasync");
    }

    #[test]
    fn accounting_puts_each_sample_in_its_group() {
        assert_eq!(
            groups(),
            [
                Group::SocketWrite,
                Group::DurableJournal,
                Group::Floor,
                Group::Ours,
                Group::Ours,
                Group::FreshInstance,
                Group::Http,
                Group::Unattributed,
                Group::WakeUps,
            ]
        );
    }

    #[test]
    fn accounting_floor_wins_over_every_other_rule() {
        // Without the row's floor, the Ed25519 sample is ours (its caller).
        let samples = parse_script(SCRIPT);
        assert_eq!(classify(&samples[2], &[]).0, Group::Ours);
        assert_eq!(classify(&samples[0], &["hyper::"]).0, Group::Floor);
    }

    #[test]
    fn accounting_names_our_functions_without_hash_or_generics() {
        let samples = parse_script(SCRIPT);
        assert_eq!(
            classify(&samples[3], ED25519).1.as_deref(),
            Some("agora_node::metrics::record_request")
        );
        assert_eq!(
            classify(&samples[4], ED25519).1.as_deref(),
            Some("<serde_json::de::Deserializer as serde::de::Deserializer>::deserialize_any")
        );
        assert_eq!(
            without_generics("<alloc::vec::Vec<u8> as core::ops::drop::Drop>::drop"),
            "<alloc::vec::Vec as core::ops::drop::Drop>::drop"
        );
        assert_eq!(
            without_generics("core::ptr::drop_in_place<fn() -> u8>"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(without_generics("tokio::spawn::<F>"), "tokio::spawn");
        assert_eq!(without_generics("a::b::<T>::c"), "a::b::c");
    }

    #[test]
    fn accounting_passes_over_unlisted_crates_and_std() {
        assert_eq!(frame_group("hashbrown::map::HashMap::insert"), None);
        assert_eq!(
            frame_group("<alloc::vec::Vec as serde::ser::Serialize>::serialize"),
            Some(Group::Ours)
        );
        assert_eq!(
            frame_group("<&mut serde_json::ser::Serializer as x>::f"),
            Some(Group::Ours)
        );
        assert_eq!(
            frame_group("agora_node::store::journal::Journal::append"),
            Some(Group::DurableJournal)
        );
        assert_eq!(frame_group("std::net::tcp::TcpStream::read"), Some(Group::Http));
        assert_eq!(
            frame_group("wasmtime_internal_cranelift::compile"),
            Some(Group::FreshInstance)
        );
        assert_eq!(frame_group("tracing_subscriber::layer::x"), Some(Group::Ours));
        assert_eq!(frame_group("mi_malloc"), None);
    }

    fn accounting(t_us: f64, counts: &[(Group, usize)], ours: &[(&str, usize)]) -> Accounting {
        Accounting {
            t_us,
            tally: Tally {
                samples: counts.iter().map(|(_, n)| n).sum(),
                groups: counts.iter().copied().collect(),
                ours: ours.iter().map(|(f, n)| (f.to_string(), *n)).collect(),
            },
            requests: 1000,
            failed: 0,
            node_cpu_seconds: t_us * 1000.0 / 1e6,
            perf_command: "perf record".into(),
            script_seconds: 0.0,
            parse_seconds: 0.0,
        }
    }

    fn full_run() -> Settings {
        Settings {
            smoke: false,
            duration: Duration::from_secs(8),
            warmup: Duration::from_secs(1),
            rounds: 3,
            connections: 16,
            node_bin: "agora-node".into(),
        }
    }

    #[test]
    fn accounting_bound_is_the_request_without_ours_and_unattributed() {
        // T = 100 µs: ours 20 µs, unattributed 10 µs → 70 µs → 14,286 req/CPU-s.
        let accounting = accounting(
            100.0,
            &[(Group::Ours, 20), (Group::Unattributed, 10), (Group::Http, 70)],
            &[("a", 12), ("b", 5), ("c", 2), ("d", 1)],
        );
        assert!((accounting.us(Group::Ours) - 20.0).abs() < 1e-9);
        assert!((accounting.stack_fraction() - 0.7).abs() < 1e-9);
        let top = accounting.top_ours(3);
        assert_eq!(top.iter().map(|(f, _)| *f).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert!((top[0].1 - 12.0).abs() < 1e-9);
        // The node at 50 % of its comparison, with 70 % of its CPU the stack:
        // its bound is 71 % of the comparison, and it is at 70 % of it, missed,
        // whatever perf's overhead made T.
        let profile = Ok(accounting);
        let missed = judge(&full_run(), &profile, 0.5, 20_000.0, 0);
        assert_eq!(missed.status, "**missed**");
        assert!(missed.ratio.contains("bound 71 %"), "{}", missed.ratio);
        assert!(missed.ratio.contains("share = 70 % of bound"), "{}", missed.ratio);
        assert_eq!(missed.node, "<br>top ours: a 12.0 µs, b 5.0 µs, c 2.0 µs");
        // Ours 6 µs and unattributed 3 µs of 100: 91 % of the bound, met (not with a failure).
        let lean = Ok(self::accounting(
            100.0,
            &[(Group::Ours, 6), (Group::Unattributed, 3), (Group::Http, 91)],
            &[],
        ));
        let met = judge(&full_run(), &lean, 0.5, 20_000.0, 0);
        assert_eq!(met.status, "met");
        assert!(met.ratio.contains("bound 55 %"), "{}", met.ratio);
        assert_eq!(judge(&full_run(), &lean, 0.5, 20_000.0, 1).status, "**missed**");
    }

    #[test]
    fn accounting_without_a_profile_is_not_measured() {
        let profile = Err(anyhow::anyhow!("perf is not installed"));
        let judged = judge(&full_run(), &profile, 0.5, 20_000.0, 0);
        assert_eq!(judged.status, "not measured");
        assert_eq!(judged.ratio, "; no profile: perf is not installed");
        let smoke = Settings {
            smoke: true,
            ..full_run()
        };
        assert_eq!(
            judge(&smoke, &profile, 0.5, 20_000.0, 0).status,
            verdict(&smoke, false)
        );
    }
}
