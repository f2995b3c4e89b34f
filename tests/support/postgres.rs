//! A real PostgreSQL server for one test: `initdb` into a temporary directory, the server on a
//! Unix socket there (no TCP port), run as the `postgres` user when the test runs as root (the
//! server refuses to run as root). Its binaries come from `pg_config --bindir` (Debian's
//! `postgresql` package, which `scripts/test-all` installs), or `$COMPACTD_PG_BIN`. Missing:
//! skipped on a developer machine, a failure under `CI=true`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    server: Option<Child>,
    /// The user the server runs as (`postgres` when the test runs as root).
    as_user: Option<String>,
    /// `fsync=off` (the tests), or the server's defaults (a benchmark's figures).
    fast: bool,
}

fn bin_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("COMPACTD_PG_BIN").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    let out = Command::new("pg_config").arg("--bindir").output().ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    dir.join("initdb").is_file().then_some(dir)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Postgres {
    /// A fresh, running server, or `None` after [`super::skip_or_fail`] naming `test`.
    pub fn start(test: &str) -> Option<Postgres> {
        Postgres::start_with(test, true)
    }

    /// [`Postgres::start`] with the server's settings at their defaults (`fsync` on), for
    /// benchmarks that measure what a real deployment pays.
    pub fn start_at_defaults(test: &str) -> Option<Postgres> {
        Postgres::start_with(test, false)
    }

    fn start_with(test: &str, fast: bool) -> Option<Postgres> {
        let Some(bin) = bin_dir() else {
            super::skip_or_fail(
                test,
                "no PostgreSQL server binaries (pg_config --bindir; install Debian's postgresql)",
            );
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("compactd-pg")
            .tempdir()
            .expect("tempdir");
        let as_user = is_root().then(|| "postgres".to_owned());
        if let Some(user) = &as_user {
            let uid = Command::new("id")
                .args(["-u", user])
                .output()
                .expect("id -u");
            let gid = Command::new("id")
                .args(["-g", user])
                .output()
                .expect("id -g");
            let num = |o: &std::process::Output| -> u32 {
                String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .parse()
                    .expect("numeric id")
            };
            std::os::unix::fs::chown(dir.path(), Some(num(&uid)), Some(num(&gid)))
                .expect("chown the server's directory");
        }
        let mut pg = Postgres {
            dir,
            bin,
            server: None,
            as_user,
            fast,
        };
        let data = pg.data_dir();
        let init = pg
            .command("initdb")
            .args(["-D"])
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("run initdb");
        assert!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        pg.start_server();
        Some(pg)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        match &self.as_user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    /// Starts the server (again) and waits until it accepts connections.
    pub fn start_server(&mut self) {
        let server = self
            .command("postgres")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-k")
            .arg(self.socket_dir())
            .args(["-c", "listen_addresses=", "-c", "max_connections=200"])
            // Tests do not measure the disk: nothing they check needs a flush to survive.
            .args(if self.fast {
                &["-c", "fsync=off"][..]
            } else {
                &[]
            })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres");
        self.server = Some(server);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = self
                .command("pg_isready")
                .arg("-h")
                .arg(self.socket_dir())
                .arg("-q")
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            assert!(Instant::now() < deadline, "postgres did not start in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the server at once: `pg_ctl stop -m immediate` aborts every server process
    /// without a clean shutdown, as a crash would (a database that goes away mid-run).
    pub fn kill_server(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = self
                .command("pg_ctl")
                .arg("-D")
                .arg(self.data_dir())
                .args(["stop", "-m", "immediate", "-w"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = s.kill();
            let _ = s.wait();
        }
    }

    /// The connection string compactd's `[storage] postgres_url` takes.
    pub fn url(&self) -> String {
        format!(
            "host={} user=postgres dbname=postgres",
            self.socket_dir().display()
        )
    }

    /// `[storage]` of a daemon on this server.
    pub fn config(&self) -> String {
        format!(
            "[storage]\nbackend = \"postgres\"\npostgres_url = \"{}\"\n",
            self.url()
        )
    }

    /// Creates `user` with `password` and makes that user (only) log in with it: its rule goes
    /// first in `pg_hba.conf` (everyone else stays trusted) and the server reloads the file.
    pub fn require_password(&self, user: &str, password: &str) {
        self.psql(&format!("CREATE ROLE {user} LOGIN PASSWORD '{password}'"));
        let hba = self.data_dir().join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
        std::fs::write(&hba, format!("local all {user} scram-sha-256\n{rules}"))
            .expect("write pg_hba.conf");
        self.psql("SELECT pg_reload_conf()");
        // Reloading is asynchronous: wait until a login without the password is refused.
        let deadline = Instant::now() + Duration::from_secs(20);
        while self
            .command("psql")
            .arg("-h")
            .arg(self.socket_dir())
            .args(["-U", user, "-d", "postgres", "-w", "-c", "SELECT 1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(
                Instant::now() < deadline,
                "the server did not reload pg_hba.conf"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs one SQL statement with `psql`; its output, tuples only.
    pub fn psql(&self, sql: &str) -> String {
        let out = self
            .command("psql")
            .arg("-h")
            .arg(self.socket_dir())
            .args(["-U", "postgres", "-d", "postgres", "-At", "-c", sql])
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// A `psql` session kept open: what its statements take (a session-level advisory lock, say)
/// is held until it is dropped, which ends the session.
pub struct Session {
    child: Child,
}

impl Session {
    /// Sends one statement (ending in `;`); it runs in the background.
    pub fn send(&mut self, sql: &str) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("psql's stdin");
        writeln!(stdin, "{sql}").expect("write to psql");
        stdin.flush().expect("flush psql's stdin");
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Postgres {
    /// An open `psql` session on the server (see [`Session`]).
    pub fn session(&self) -> Session {
        let child = self
            .command("psql")
            .arg("-h")
            .arg(self.socket_dir())
            .args(["-U", "postgres", "-d", "postgres", "-Atq"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("psql");
        Session { child }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = self
                .command("pg_ctl")
                .arg("-D")
                .arg(self.data_dir())
                .args(["stop", "-m", "immediate"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}
