//! `compactd pi install` puts compactd into the real Pi 1.6.0 in one command: afterwards `pi
//! list` shows the extension's package, `pi mcp list` connects to the `compactd` MCP server and
//! lists its two tools, and Pi's own resource loader loads the extension from the package
//! without an error; `compactd pi uninstall` takes both out. Pi is the 1.6 oracle's install
//! (`support::oracle`), run through a `pi` command on PATH, in a home of the test's own.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::daemon_env::Stopper;
use support::oracle::Oracle;
use support::PiVersion;

const BIN: &str = env!("CARGO_BIN_EXE_compactd");

struct PiHome {
    dir: tempfile::TempDir,
    oracle: Oracle,
}

impl PiHome {
    fn new(oracle: Oracle) -> PiHome {
        let dir = tempfile::tempdir().expect("tempdir");
        for d in ["bin", "home/project", "run"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("dirs");
        }
        // `pi` as a user has it: Pi 1.6.0's CLI under the Node it needs.
        let pi = dir.path().join("bin/pi");
        std::fs::write(
            &pi,
            format!(
                "#!/bin/sh\nexec \"{}\" \"{}\" \"$@\"\n",
                oracle.node().display(),
                oracle.dir().join(PI_CLI).display()
            ),
        )
        .expect("write pi");
        std::fs::set_permissions(&pi, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod pi");
        PiHome { dir, oracle }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `program args…` in the project directory, with this home, `pi` on PATH, and the
    /// daemon's socket under the test's own runtime directory.
    fn run(&self, program: &Path, args: &[&str]) -> Output {
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new(program)
            .args(args)
            .current_dir(self.path("home/project"))
            .env("HOME", self.path("home"))
            .env("PATH", path)
            .env("COMPACTD_RUNTIME_DIR", self.path("run"))
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("PI_CODING_AGENT_DIR")
            .env_remove("COMPACTD_LOG")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()))
    }

    fn pi(&self, args: &[&str]) -> String {
        let out = self.run(&self.path("bin/pi"), args);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// Pi's CLI inside the oracle's install.
const PI_CLI: &str = "node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js";

fn text(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn compactd_pi_install_puts_the_extension_and_the_mcp_server_into_pi_16() {
    let Some(oracle) = Oracle::of(PiVersion::V1_6, "compactd pi install") else {
        return;
    };
    let home = PiHome::new(oracle);
    // `pi mcp list` starts `compactd mcp`, which starts a daemon on this socket.
    let _stop = Stopper(home.path("run/compactd/compactd.sock"));
    let package = home.path("home/.local/share/compactd/pi-extension");

    let out = home.run(Path::new(BIN), &["pi", "install"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("compactd is in Pi"),
        "{}",
        text(&out)
    );
    let listed = home.pi(&["list"]);
    assert!(
        listed.contains(&package.display().to_string()),
        "pi list shows the package:\n{listed}"
    );
    let servers = home.pi(&["mcp", "list"]);
    assert!(
        servers.contains("compactd: connected, 2 tools")
            && servers.contains("get_entry, search_history"),
        "pi mcp list connects to compactd:\n{servers}"
    );

    // Pi's own resource loader, on the settings `pi install` wrote, loads the extension.
    let check = format!(
        r#"const sdk = await import({dist:?});
const agentDir = {agent:?};
const cwd = {cwd:?};
const settingsManager = sdk.SettingsManager.create(cwd, agentDir);
const loader = new sdk.DefaultResourceLoader({{ cwd, agentDir, settingsManager, noSkills: true, noPromptTemplates: true, noThemes: true, noContextFiles: true }});
await loader.reload();
const loaded = loader.getExtensions();
console.log(JSON.stringify({{ errors: loaded.errors, paths: loaded.extensions.map((e) => e.path) }}));"#,
        dist = format!(
            "file://{}",
            home.oracle
                .dir()
                .join("node_modules/@earendil-works/pi-coding-agent/dist/bundle/index.js")
                .display()
        ),
        agent = home.path("home/.pi/agent").display().to_string(),
        cwd = home.path("home/project").display().to_string(),
    );
    let out = home.run(home.oracle.node(), &["--input-type=module", "-e", &check]);
    assert!(out.status.success(), "{}", text(&out));
    let loaded: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(loaded["errors"], serde_json::json!([]), "{loaded}");
    let paths: Vec<&str> = loaded["paths"]
        .as_array()
        .map(|p| p.iter().filter_map(|p| p.as_str()).collect())
        .unwrap_or_default();
    assert!(
        paths.len() == 1 && paths[0].starts_with(&package.display().to_string()),
        "the extension is loaded from the package: {loaded}"
    );

    let out = home.run(Path::new(BIN), &["pi", "uninstall"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(home.pi(&["list"]).contains("No packages installed"));
    assert!(home
        .pi(&["mcp", "list"])
        .contains("No MCP servers configured"));
    assert!(!package.exists(), "the package's files are gone");
}

#[test]
fn without_pi_the_command_says_how_to_get_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .args(["pi", "install", "--pi"])
        .arg(dir.path().join("no-pi"))
        .env("HOME", dir.path())
        .env_remove("XDG_DATA_HOME")
        .output()
        .expect("compactd pi install");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no-pi not found: install Pi (npm install -g @earendil-works/pi-coding-agent) or name it with --pi"),
        "{err}"
    );
}
