//! `compactd pi install` / `compactd pi uninstall`: compactd in Pi (1.6 and later) with one
//! command. Install writes the compactd extension (the Pi package of `clients/pi-extension`,
//! carried inside this binary so it matches the daemon it talks to) to compactd's data
//! directory, has Pi install that package (`pi install <dir>`), and registers the recall tools'
//! MCP server with Pi (`pi mcp add compactd -- <this binary> mcp --cwd .`: Pi starts MCP servers
//! in the session's directory, so `.` is the project whose latest session it recalls).
//! Uninstall undoes both. Pi's own commands do the work, so Pi's settings files are written
//! the way Pi writes them; `pi list` and `pi mcp list` then show both.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{EXIT_FAILED, EXIT_OK};

/// The files of the extension's package, as the repository has them.
const PACKAGE: [(&str, &str); 3] = [
    (
        "package.json",
        include_str!("../../clients/pi-extension/package.json"),
    ),
    (
        "index.ts",
        include_str!("../../clients/pi-extension/index.ts"),
    ),
    (
        "README.md",
        include_str!("../../clients/pi-extension/README.md"),
    ),
];

/// The name the MCP server is registered under (its tools are `mcp__compactd__…` in Pi).
pub const MCP_NAME: &str = "compactd";

/// What `compactd pi install|uninstall` was asked.
pub struct Setup<'a> {
    /// The `pi` command (default: `pi` on PATH).
    pub pi: &'a Path,
    /// Pi's project settings (`.pi/` of the current directory) instead of the user's.
    pub local: bool,
}

/// Where the extension's package is written: `$XDG_DATA_HOME/compactd/pi-extension`, else
/// `~/.local/share/compactd/pi-extension`.
pub fn package_dir() -> Result<PathBuf, String> {
    let data = crate::config::xdg_dir("XDG_DATA_HOME", ".local/share")
        .ok_or("neither XDG_DATA_HOME nor HOME is set: nowhere to put the extension")?;
    Ok(data.join("compactd").join("pi-extension"))
}

/// Writes the extension's package to `dir` (replacing an older copy's files).
fn write_package(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (name, text) in PACKAGE {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Runs `pi <sub…> [-l] <rest…>` (`-l`: Pi's project settings), echoing what it printed; `Err`
/// says what failed.
fn pi(setup: &Setup, sub: &[&str], rest: &[&std::ffi::OsStr]) -> Result<(), String> {
    let mut cmd = Command::new(setup.pi);
    cmd.args(sub);
    if setup.local {
        cmd.arg("-l");
    }
    cmd.args(rest);
    let shown = format!("{} {}", setup.pi.display(), sub.join(" "));
    let out = cmd.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "{} not found: install Pi (npm install -g @earendil-works/pi-coding-agent) or name it with --pi",
            setup.pi.display()
        ),
        _ => format!("cannot run {}: {e}", setup.pi.display()),
    })?;
    let text = |b: &[u8]| super::printable::text(&String::from_utf8_lossy(b)).into_owned();
    print!("{}", text(&out.stdout));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{shown}` failed ({}): {}",
            out.status,
            text(&out.stderr).trim()
        ))
    }
}

/// `compactd pi install`: the extension as a Pi package, and the MCP server.
pub fn install(setup: &Setup) -> i32 {
    let run = || -> Result<PathBuf, String> {
        let dir = package_dir()?;
        write_package(&dir)?;
        pi(setup, &["install"], &[dir.as_os_str()])?;
        let exe = std::env::current_exe()
            .and_then(|p| p.canonicalize())
            .map_err(|e| format!("cannot tell where this compactd is: {e}"))?;
        // Pi 0.85 has no `pi mcp`: then this fails, after the extension (which registers the
        // same tools itself) was installed.
        pi(
            setup,
            &["mcp", "add"],
            &[
                MCP_NAME.as_ref(),
                "--".as_ref(),
                exe.as_os_str(),
                "mcp".as_ref(),
                "--cwd".as_ref(),
                ".".as_ref(),
            ],
        )?;
        Ok(dir)
    };
    match run() {
        Ok(dir) => {
            println!(
                "compactd is in Pi: the extension ({}) delegates Pi's compactions and adds the recall tools, and the MCP server `{MCP_NAME}` serves the same tools to Pi over MCP. Check with `pi list` and `pi mcp list`; `compactd pi uninstall` removes both.",
                dir.display()
            );
            EXIT_OK
        }
        Err(e) => {
            crate::print_err!("{e}");
            EXIT_FAILED
        }
    }
}

/// `compactd pi uninstall`: Pi forgets the package and the MCP server; the package's files go.
pub fn uninstall(setup: &Setup) -> i32 {
    let run = || -> Result<PathBuf, String> {
        let dir = package_dir()?;
        pi(setup, &["remove"], &[dir.as_os_str()])?;
        pi(setup, &["mcp", "remove"], &[MCP_NAME.as_ref()])?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
        }
        Ok(dir)
    };
    match run() {
        Ok(dir) => {
            println!(
                "removed compactd from Pi (the package {} and the MCP server `{MCP_NAME}`)",
                dir.display()
            );
            EXIT_OK
        }
        Err(e) => {
            crate::print_err!("{e}");
            EXIT_FAILED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_package_carried_is_a_pi_package_of_the_extension() {
        let manifest: serde_json::Value =
            serde_json::from_str(PACKAGE[0].1).expect("package.json parses");
        assert_eq!(
            manifest["pi"]["extensions"],
            serde_json::json!(["./index.ts"])
        );
        assert!(manifest["keywords"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "pi-package")));
        assert!(manifest.get("private").is_none(), "ready for npm");
        let files: Vec<&str> = manifest["files"]
            .as_array()
            .map(|f| f.iter().filter_map(|f| f.as_str()).collect())
            .unwrap_or_default();
        for (name, _) in &PACKAGE[1..] {
            assert!(files.contains(name), "{name} is published");
        }
        assert!(PACKAGE[1].1.contains("export default function compactd"));
    }
}
