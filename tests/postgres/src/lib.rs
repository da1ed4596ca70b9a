//! A real PostgreSQL for the tests: Debian's `postgresql` package, a cluster
//! in a temp folder on a free loopback port, a fresh database per test.
//!
//! Why a real server and not a mock: the PostgreSQL backend's guarantees (one
//! winner of a race, migrations applied once by several nodes, recovery after
//! the database went away, durability of acknowledged writes) are properties
//! of the server's locking and commit, which only the server can show. The
//! cluster runs with PostgreSQL's default durability (`fsync` on) unless
//! `AGORA_TEST_PG_FAST=1` asks for `fsync=off, synchronous_commit=off`.
//!
//! PostgreSQL refuses to run as root: when the tests run as root, the folder is
//! handed to the `postgres` system user (created by the Debian package) and the
//! server tools run with its uid and gid.
//!
//! **No server outlives the test process.** Next to the server runs a watchdog
//! (`sh`) whose standard input is a pipe from the test process; the test
//! process never writes to it, and only it holds the write end (std opens pipes
//! close-on-exec, so no other child inherits it). However the test process
//! ends — normally, by a panic, by `SIGKILL` — the kernel closes that end, the
//! watchdog's `read` returns, and it stops the server (`SIGQUIT`, immediate
//! shutdown) and removes the folder. Server and watchdog run in their own
//! process group, so a Ctrl-C at the terminal reaches the tests, not them
//! mid-cleanup. [`Postgres`]'s `Drop` does the same at once for clusters a test
//! owns; [`Postgres::shared`] lives until the process ends.
//!
//! [`Postgres::start_with_tls`] starts a cluster with `ssl = on`, serving a
//! certificate and key the test made (so the test knows which CA signed it and
//! for which names), and optionally asking every TCP client for a certificate
//! signed by a CA the test names; its admin tools then use the Unix socket.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const NOT_INSTALLED: &str = "PostgreSQL's server tools (initdb, postgres, pg_ctl) were not found on PATH or in \
     /usr/lib/postgresql/*/bin: install Debian's postgresql package (./x test does)";

/// How long a start may take before the test fails with the server's log.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The role `initdb` creates; every database belongs to it, trust auth on loopback.
const ROLE: &str = "agora";

/// What a cluster started with [`Postgres::start_with_tls`] serves, as PEM.
pub struct ServerTls {
    /// The server's certificate chain, leaf first.
    pub cert_pem: String,
    pub key_pem: String,
    /// When set, every TCP connection must present a client certificate
    /// signed by one of these CAs (`hostssl … clientcert=verify-ca`).
    pub client_ca_pem: Option<String>,
}

/// One PostgreSQL cluster, stopped and removed on drop.
pub struct Postgres {
    bin: PathBuf,
    /// The temp folder: `data/` (the cluster), `server.log`, and the unix socket.
    root: PathBuf,
    port: u16,
    /// `Some` when running as root: the `postgres` system user's uid and gid.
    run_as: Option<(u32, u32)>,
    server: Mutex<Option<Child>>,
    /// The `-c` settings that turn TLS on, when the cluster serves it.
    tls_settings: Vec<String>,
    /// Whether TCP clients must present a certificate (admin tools use the socket).
    client_certificates: bool,
    /// The watchdog, its stdin pipe held open and never written (see the module doc).
    watchdog: Mutex<Child>,
    databases: AtomicU32,
}

impl Postgres {
    /// A new cluster of its own, running. Panics with a clear message when
    /// PostgreSQL is not installed or does not start.
    pub fn start() -> Postgres {
        Self::start_cluster(None)
    }

    /// A new cluster of its own serving TLS with `tls`'s certificate (and plain
    /// TCP too: a client's `sslmode` decides).
    pub fn start_with_tls(tls: &ServerTls) -> Postgres {
        Self::start_cluster(Some(tls))
    }

    fn start_cluster(tls: Option<&ServerTls>) -> Postgres {
        let bin = find_bin().unwrap_or_else(|| panic!("{NOT_INSTALLED}"));
        static CLUSTERS: AtomicU32 = AtomicU32::new(0);
        let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("agora-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("creating the cluster's temp folder");
        let run_as = running_as_root().then(postgres_user);
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(&root, Some(uid), Some(gid)).expect("handing the folder to postgres");
        }
        let watchdog = spawn_watchdog(&root);
        let mut cluster = Postgres {
            bin,
            root,
            port: free_port(),
            run_as,
            server: Mutex::new(None),
            tls_settings: Vec::new(),
            client_certificates: false,
            watchdog: Mutex::new(watchdog),
            databases: AtomicU32::new(0),
        };
        cluster.initdb();
        if let Some(tls) = tls {
            cluster.configure_tls(tls);
        }
        cluster.spawn_server();
        cluster
    }

    /// Write the server's pair (and the client CA) where the server reads them,
    /// owned by its user with the modes it insists on.
    fn configure_tls(&mut self, tls: &ServerTls) {
        let cert = self.write_private("server.crt", &tls.cert_pem);
        let key = self.write_private("server.key", &tls.key_pem);
        self.tls_settings = vec![
            "ssl=on".into(),
            format!("ssl_cert_file={}", cert.display()),
            format!("ssl_key_file={}", key.display()),
        ];
        if let Some(client_ca) = &tls.client_ca_pem {
            let ca = self.write_private("client-ca.crt", client_ca);
            self.tls_settings.push(format!("ssl_ca_file={}", ca.display()));
            // Read top down: TCP without a verified client certificate matches no line.
            let hba = self.data().join("pg_hba.conf");
            std::fs::write(
                &hba,
                "local all all trust\nhostssl all all 127.0.0.1/32 trust clientcert=verify-ca\n",
            )
            .expect("writing pg_hba.conf");
            self.hand_over(&hba);
            self.client_certificates = true;
        }
    }

    fn write_private(&self, name: &str, contents: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.root.join(name);
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("writing {name}: {e}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
        self.hand_over(&path);
        path
    }

    /// Give a file to the server's user (when we are root and it is not us).
    fn hand_over(&self, path: &Path) {
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("handing a file to postgres");
        }
    }

    /// Where the admin tools connect: loopback TCP, or the Unix socket when TCP
    /// clients must present a certificate the tools do not have.
    fn admin_host(&self) -> String {
        if self.client_certificates {
            self.root.display().to_string()
        } else {
            "127.0.0.1".to_string()
        }
    }

    /// One cluster for the whole test process, started by the first caller.
    pub fn shared() -> &'static Postgres {
        static SHARED: OnceLock<Postgres> = OnceLock::new();
        SHARED.get_or_init(Postgres::start)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection URL of database `db` (TCP on loopback, no password).
    pub fn url_for(&self, db: &str) -> String {
        format!("postgres://{ROLE}@127.0.0.1:{}/{db}", self.port)
    }

    /// A fresh, empty database; its URL.
    pub fn create_database(&self) -> String {
        let name = format!("test_{}", self.databases.fetch_add(1, Ordering::Relaxed));
        let status = Command::new(self.bin.join("createdb"))
            .args([
                "-h",
                &self.admin_host(),
                "-p",
                &self.port.to_string(),
                "-U",
                ROLE,
                &name,
            ])
            .status()
            .expect("running createdb");
        assert!(status.success(), "createdb {name} failed");
        self.url_for(&name)
    }

    /// One value a query of `url`'s database answers, as text (`psql`, so a test
    /// reads what the node wrote without a client library of its own).
    pub fn query_one(&self, url: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-A", "-t", "-d", url, "-c", sql])
            .output()
            .expect("running psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Stop the server (fast shutdown: sessions are cut, nothing committed is
    /// lost); the data stays for [`Postgres::restart`].
    pub fn stop(&self) {
        let mut server = self.server.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut child) = server.take() {
            let stopped = self
                .server_tool("pg_ctl")
                .args(["stop", "-w", "-m", "fast", "-D"])
                .arg(self.data())
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !stopped {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    /// Start the server again on the same port with the same data.
    pub fn restart(&self) {
        self.stop();
        self.spawn_server();
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// A PostgreSQL server program, run as the `postgres` user when we are root.
    fn server_tool(&self, name: &str) -> Command {
        let mut command = Command::new(self.bin.join(name));
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        command.env("LC_ALL", "C").current_dir(&self.root);
        command
    }

    fn initdb(&self) {
        let output = self
            .server_tool("initdb")
            .args([
                "-A",
                "trust",
                "-U",
                ROLE,
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
                "-D",
            ])
            .arg(self.data())
            .output()
            .expect("running initdb");
        assert!(
            output.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn spawn_server(&self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("opening the server log");
        let mut command = self.server_tool("postgres");
        command
            .arg("-D")
            .arg(self.data())
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.root)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=400"]);
        for setting in &self.tls_settings {
            command.arg("-c").arg(setting);
        }
        if std::env::var_os("AGORA_TEST_PG_FAST").is_some_and(|v| v == "1") {
            command.args(["-c", "fsync=off", "-c", "synchronous_commit=off"]);
        }
        let child = command
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("starting postgres");
        *self.server.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
        self.wait_until_ready();
    }

    fn wait_until_ready(&self) {
        let started = Instant::now();
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", ROLE])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            let exited = self
                .server
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
                .is_none_or(|child| child.try_wait().ok().flatten().is_some());
            if exited || started.elapsed() > START_TIMEOUT {
                panic!(
                    "PostgreSQL did not start on port {}; its log:\n{}",
                    self.port,
                    std::fs::read_to_string(self.log_path()).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_path(&self) -> PathBuf {
        self.root.join("server.log")
    }
}

impl Drop for Postgres {
    /// Stop the server, then close the watchdog's pipe and wait for it to remove the folder.
    fn drop(&mut self) {
        self.stop();
        let watchdog = self.watchdog.get_mut().unwrap_or_else(|p| p.into_inner());
        drop(watchdog.stdin.take());
        let _ = watchdog.wait();
    }
}

/// The folder holding initdb, postgres and pg_ctl: PATH first (following a
/// symlink to its real folder), then the newest /usr/lib/postgresql/*/bin.
fn find_bin() -> Option<PathBuf> {
    let complete = |dir: &Path| {
        ["initdb", "postgres", "pg_ctl", "pg_isready", "createdb"]
            .iter()
            .all(|t| dir.join(t).is_file())
    };
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|dir| std::fs::canonicalize(dir.join("initdb")).ok())
        .filter_map(|initdb| initdb.parent().map(Path::to_path_buf))
        .find(|dir| complete(dir));
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| complete(dir))
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// The `postgres` system user's uid and gid (the Debian package creates it).
fn postgres_user() -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, "postgres"]).output().ok()?;
        std::str::from_utf8(&out.stdout).ok()?.trim().parse().ok()
    };
    match (id("-u"), id("-g")) {
        (Some(uid), Some(gid)) => (uid, gid),
        _ => panic!("running as root, but there is no `postgres` user to run the server as: {NOT_INSTALLED}"),
    }
}

/// See the module doc: stops the server and removes `root` once our end of its
/// stdin closes, however this process ends.
fn spawn_watchdog(root: &Path) -> Child {
    const SCRIPT: &str = r#"read -r _
pid=$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null; then
    # Until it is gone or a zombie (nobody may reap it), 30 s at most.
    for _ in $(seq 300); do
        state=$(cut -d ' ' -f 3 "/proc/$pid/stat" 2>/dev/null) || break
        [ "$state" = Z ] && break
        sleep 0.1
    done
fi
rm -rf "$1""#;
    Command::new("sh")
        .args(["-c", SCRIPT, "agora-pg-watchdog"])
        .arg(root)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the PostgreSQL watchdog")
}

/// A loopback port nobody listens on now, for a server a test starts to bind
/// itself a moment later (PostgreSQL here; the node and the Python peers in the
/// e2e suite, which uses this one too).
///
/// Not the kernel's pick (`bind(0)`): such a port comes from the ephemeral
/// range (32768–60999 on Linux), and once the probe is closed the kernel may
/// hand it out again, to an outgoing connection or another test's `bind(0)`,
/// before the server binds it: "address already in use", or a test talking to
/// someone else's server. Below that range only explicit binds land. Each
/// process starts at its own random place in 10000–31999 and walks on, so
/// parallel tests and test processes do not take the same port.
pub fn free_port() -> u16 {
    const FIRST: u32 = 10_000;
    const COUNT: u32 = 22_000;
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        AtomicU32::new((nanos ^ std::process::id().wrapping_mul(2_654_435_761)) % COUNT)
    });
    for _ in 0..COUNT {
        let port = (FIRST + next.fetch_add(1, Ordering::AcqRel) % COUNT) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {FIRST}..{}", FIRST + COUNT)
}
