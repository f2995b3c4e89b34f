//! Why PostgreSQL cannot be used, in the server's and the system's own words, and what to do
//! about it. The driver's own message names only a class ("error connecting to server", "db
//! error"); the cause is further down its error's chain (the system's error for a socket that
//! is not there, the server's `FATAL` for a role or a password it refuses), and a user fixing a
//! configuration needs that cause, where compactd tried to connect, and which setting to change.

use std::error::Error as StdError;

use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;

/// Where the connection string is set, named in every fix.
const SETTING: &str = "[storage] postgres_url (or COMPACTD_POSTGRES_URL)";

/// The message of a store error for the driver's error `e`: its own text with every cause down
/// its chain, then, when the cause is one a user fixes, ` Fix: …`. `config` (the connection's
/// settings, when the error came from connecting) names where compactd tried.
pub fn explain(e: &tokio_postgres::Error, config: Option<&tokio_postgres::Config>) -> String {
    let mut text = e.to_string();
    if let Some(at) = config.map(target) {
        text = format!("{text} ({at})");
    }
    let mut cause: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            // The server's DETAIL and HINT lines, kept on the message's one line.
            text = format!("{text}: {}", said.replace('\n', "; "));
        }
        cause = c.source();
    }
    match fix(e) {
        Some(fix) => format!("{text}. Fix: {fix}"),
        None => text,
    }
}

/// Where a connection goes: `host /run/postgresql port 5432 user alice database app`.
fn target(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(dir) => dir.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let mut at = format!(
        "host {}",
        if hosts.is_empty() {
            "(default)".into()
        } else {
            hosts.join(",")
        }
    );
    if !ports.is_empty() {
        at += &format!(" port {}", ports.join(","));
    }
    if let Some(user) = config.get_user() {
        at += &format!(" user {user}");
    }
    if let Some(db) = config.get_dbname() {
        at += &format!(" database {db}");
    }
    at
}

/// What a user does about `e`, when it is a cause a user fixes.
fn fix(e: &tokio_postgres::Error) -> Option<String> {
    if let Some(code) = e.code() {
        return fix_for_code(code);
    }
    let mut cause: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return fix_for_io(io.kind());
        }
        cause = c.source();
    }
    // The driver's own timeout (no answer within the connection timeout).
    e.to_string()
        .contains("timeout")
        .then(|| format!("check that the host and port in {SETTING} are the server's and that it answers (connect_timeout in the string waits longer)"))
}

/// The fix for a refusal the server sent (its SQLSTATE).
fn fix_for_code(code: &SqlState) -> Option<String> {
    let fix = if *code == SqlState::INVALID_PASSWORD {
        format!("check the password in {SETTING} (or PGPASSWORD, ~/.pgpass) for that user")
    } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
        format!("create the role (`createuser NAME` as the server's superuser) or set an existing user in {SETTING}; the server's pg_hba.conf must allow it to connect")
    } else if *code == SqlState::INVALID_CATALOG_NAME {
        format!("create the database (`createdb NAME`) or name an existing one in {SETTING}")
    } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
        "grant the user the right to create tables in the database (compactd makes its own schema), or connect as one who has it".into()
    } else if *code == SqlState::TOO_MANY_CONNECTIONS || *code == SqlState::CANNOT_CONNECT_NOW {
        "wait until the server accepts connections again, or raise its max_connections".into()
    } else {
        return None;
    };
    Some(fix)
}

/// The fix for a system error on the way to the server.
fn fix_for_io(kind: std::io::ErrorKind) -> Option<String> {
    use std::io::ErrorKind::*;
    Some(match kind {
        NotFound | ConnectionRefused => format!(
            "start the PostgreSQL server, or point {SETTING} at the host (a socket directory, or a name) and port it listens on"
        ),
        PermissionDenied => format!(
            "compactd's user may not open the server's socket: use a socket directory it can reach, or TCP, in {SETTING}"
        ),
        TimedOut => format!("check that the host and port in {SETTING} are the server's and that nothing blocks the way"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_a_user_fixes_has_its_fix() {
        let password = fix_for_code(&SqlState::INVALID_PASSWORD).unwrap_or_default();
        assert!(password.contains("password") && password.contains(SETTING));
        let role = fix_for_code(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION).unwrap_or_default();
        assert!(role.contains("createuser"), "{role}");
        let db = fix_for_code(&SqlState::INVALID_CATALOG_NAME).unwrap_or_default();
        assert!(db.contains("createdb"), "{db}");
        assert_eq!(fix_for_code(&SqlState::SYNTAX_ERROR), None);
        let gone = fix_for_io(std::io::ErrorKind::NotFound).unwrap_or_default();
        assert!(gone.contains("start the PostgreSQL server"), "{gone}");
        assert_eq!(fix_for_io(std::io::ErrorKind::InvalidData), None);
    }

    #[test]
    fn the_target_names_host_port_user_and_database() {
        let config: tokio_postgres::Config = "host=/run/pg port=5433 user=alice dbname=app"
            .parse()
            .expect("config");
        assert_eq!(
            target(&config),
            "host /run/pg port 5433 user alice database app"
        );
    }
}
