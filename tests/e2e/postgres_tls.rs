//! TLS to PostgreSQL: real `agora-node` processes against a real PostgreSQL
//! started with `ssl = on`, serving a certificate this test makes (rcgen, the
//! throwaway CA of `pki`) for `127.0.0.1` only. Each refusal must stop the node
//! at start-up with words that say what to change; each accepted mode must
//! serve, with every connection of the node (pool and fleet bus) encrypted.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agora_test_postgres::{Postgres, ServerTls};

use crate::pki::{LeafKind, TestCa};
use crate::support::{self, TestNode};

/// A node refused at start-up exits within this (the pool's first connection
/// fails at once); it only turns a node that wrongly serves into a failure.
const EXIT_PATIENCE: Duration = Duration::from_secs(60);

/// A cluster serving TLS, and the CA that signed its certificate.
pub(crate) struct TlsCluster {
    pub(crate) ca: TestCa,
    pub(crate) postgres: Postgres,
}

impl TlsCluster {
    pub(crate) fn start(client_certificates: bool) -> TlsCluster {
        let ca = TestCa::new();
        let leaf = ca.leaf_of(LeafKind::ForName("127.0.0.1"));
        let ca_pem = std::fs::read_to_string(ca.ca_file()).expect("the CA's PEM");
        let postgres = Postgres::start_with_tls(&ServerTls {
            cert_pem: leaf.cert_pem,
            key_pem: leaf.key_pem,
            client_ca_pem: client_certificates.then_some(ca_pem),
        });
        TlsCluster { ca, postgres }
    }

    /// One cluster for the tests that need no client certificate.
    fn shared() -> &'static TlsCluster {
        static SHARED: OnceLock<TlsCluster> = OnceLock::new();
        SHARED.get_or_init(|| TlsCluster::start(false))
    }

    /// A fresh database's URL on `host` (connecting to 127.0.0.1 whatever the
    /// name: `hostaddr`) with `sslmode`.
    pub(crate) fn url(&self, host: &str, sslmode: &str) -> String {
        let database = self.postgres.create_database();
        let name = database.rsplit('/').next().expect("a database name");
        format!(
            "postgres://agora@{host}:{}/{name}?hostaddr=127.0.0.1&sslmode={sslmode}",
            self.postgres.port()
        )
    }
}

/// The environment of a fleet node on `url`, trusting `ca_file` for the database.
fn database_env(url: &str, ca_file: Option<&Path>) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("AGORA_STORE__BACKEND", "postgres".to_string()),
        ("AGORA_STORE__POSTGRES_URL", url.to_string()),
    ];
    if let Some(ca_file) = ca_file {
        env.push(("AGORA_STORE__POSTGRES_CA_FILE", ca_file.display().to_string()));
    }
    env
}

fn serving_node(env: &[(&'static str, String)]) -> TestNode {
    let mut builder = TestNode::builder();
    for (key, value) in env {
        builder = builder.env(key, value.clone());
    }
    let node = builder.start();
    let health = node.wait_for_health("the store", |health| health["store"]["status"] == "ok");
    assert_eq!(health["store"]["backend"], "postgres", "{health}");
    node
}

/// Start a node that must refuse to start; its standard error.
fn refused_start(env: &[(&'static str, String)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agora-node"));
    command
        .arg("serve")
        .current_dir(dir.path())
        .env("AGORA_DATA_DIR", dir.path())
        .env("AGORA_LISTEN", format!("127.0.0.1:{}", support::free_port()))
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("starting agora-node");
    let deadline = Instant::now() + EXIT_PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for agora-node") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("agora-node did not stop at start-up within {EXIT_PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).unwrap();
    assert!(!status.success(), "start-up should fail; stderr:\n{stderr}");
    stderr
}

/// How many of the node's connections to the database are (encrypted, in the clear), and
/// whether its fleet bus connection is among the encrypted ones.
fn node_connections(postgres: &Postgres, url: &str) -> (u64, u64, bool) {
    // psql (libpq) reads the same URL; `require` is all it needs to read the views.
    let admin = url.replace("sslmode=verify-full", "sslmode=require");
    let row = postgres.query_one(
        &admin,
        "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl),
                bool_or(s.ssl AND a.application_name LIKE 'agora-fleet-%')
         FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
         WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
           AND a.application_name LIKE 'agora-%'",
    );
    let fields: Vec<&str> = row.split('|').collect();
    assert_eq!(fields.len(), 3, "{row}");
    (
        fields[0].parse().expect("a count"),
        fields[1].parse().expect("a count"),
        fields[2] == "t",
    )
}

#[test]
fn verify_full_with_the_right_ca_serves_over_encrypted_connections_only() {
    let cluster = TlsCluster::shared();
    let url = cluster.url("127.0.0.1", "verify-full");
    let node = serving_node(&database_env(&url, Some(&cluster.ca.ca_file())));
    node.wait_until(
        "the fleet bus connection, encrypted",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || node_connections(&cluster.postgres, &url).2,
    );
    let (encrypted, clear, _) = node_connections(&cluster.postgres, &url);
    assert!(
        encrypted >= 2,
        "the pool's and the bus's connections: {encrypted}"
    );
    assert_eq!(clear, 0, "no connection of the node in the clear");
}

#[test]
fn a_certificate_from_another_ca_is_refused_at_start_up_naming_the_ca_file() {
    let cluster = TlsCluster::shared();
    let other = TestCa::new();
    let url = cluster.url("127.0.0.1", "verify-full");
    let stderr = refused_start(&database_env(&url, Some(&other.ca_file())));
    assert!(stderr.contains("not signed by a trusted CA"), "{stderr}");
    assert!(stderr.contains("store.postgres_ca_file"), "{stderr}");
    // Without a CA file the node's outbound trust (system roots) applies: refused too.
    let stderr = refused_start(&database_env(&cluster.url("127.0.0.1", "verify-ca"), None));
    assert!(stderr.contains("not signed by a trusted CA"), "{stderr}");
}

#[test]
fn a_certificate_for_another_host_name_is_refused_by_verify_full_only() {
    let cluster = TlsCluster::shared();
    let ca_file = cluster.ca.ca_file();
    // The certificate names 127.0.0.1; the URL reaches it as db.agora.test.
    let url = cluster.url("db.agora.test", "verify-full");
    let stderr = refused_start(&database_env(&url, Some(&ca_file)));
    assert!(stderr.contains("name mismatch"), "{stderr}");
    assert!(stderr.contains("db.agora.test"), "{stderr}");
    // verify-ca checks the chain and not the name: the same server is accepted.
    serving_node(&database_env(
        &cluster.url("db.agora.test", "verify-ca"),
        Some(&ca_file),
    ));
}

#[test]
fn against_a_server_without_tls_require_is_refused_and_disable_serves() {
    let plain = Postgres::shared();
    let database = plain.create_database();
    let stderr = refused_start(&database_env(&format!("{database}?sslmode=require"), None));
    assert!(stderr.contains("does not offer TLS"), "{stderr}");
    let stderr = refused_start(&database_env(&format!("{database}?sslmode=prefer"), None));
    assert!(stderr.contains("`store.postgres_url`"), "{stderr}");
    assert!(stderr.contains("plaintext"), "{stderr}");
    serving_node(&database_env(&format!("{database}?sslmode=disable"), None));
}

#[test]
fn a_server_asking_for_a_client_certificate_gets_the_configured_one() {
    let cluster = TlsCluster::start(true);
    let ca_file = cluster.ca.ca_file();
    let url = cluster.url("127.0.0.1", "verify-full");
    let stderr = refused_start(&database_env(&url, Some(&ca_file)));
    assert!(stderr.contains("client certificate"), "{stderr}");
    let client = cluster.ca.leaf(7);
    let cert_file = cluster.ca.dir.path().join("client.crt");
    let key_file = cluster.ca.dir.path().join("client.key");
    std::fs::write(&cert_file, &client.cert_pem).unwrap();
    std::fs::write(&key_file, &client.key_pem).unwrap();
    let mut env = database_env(&url, Some(&ca_file));
    env.push((
        "AGORA_STORE__POSTGRES_CLIENT_CERT_FILE",
        cert_file.display().to_string(),
    ));
    env.push((
        "AGORA_STORE__POSTGRES_CLIENT_KEY_FILE",
        key_file.display().to_string(),
    ));
    serving_node(&env);
}
