//! `compactd top`: a live terminal view of every session open in a running daemon, and the
//! reference subscribe-to-events client.
//!
//! Three parts, each its own module:
//! - [`model`] and [`ui`]: the pure view model (`listSessions` snapshots and events in, rows
//!   and event lines out) and what the keys do;
//! - [`client`]: the connection shell (socket, JSON-RPC, subscription, poll, reconnection),
//!   run on its own thread and feeding the shared model;
//! - [`render`] (ratatui + crossterm) and [`plain`] (`--once`): the two ways to show it.
//!
//! The terminal thread draws at most every [`FRAME`], and only when the model changed or a
//! timer on screen moves; the connection thread applies every event as it arrives, so a slow
//! terminal drops frames, never events (see [`client`]). Keys act through ordinary methods
//! (`compact`, `previewCompaction`, `abortCompaction`); session ids are daemon-wide and those
//! methods need no hold on the session, so `top` opens none.

pub mod client;
pub mod model;
pub mod plain;
pub mod render;
pub mod ui;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tokio_util::sync::CancellationToken;

use super::{write_stdout, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use client::{Command, Shared};
use ui::{Action, Key, Ui};

/// Shortest time between two frames.
const FRAME: Duration = Duration::from_millis(50);
/// Longest time between two frames (elapsed times and ages on screen move).
const TICK: Duration = Duration::from_millis(250);
/// How long `--once` waits for the daemon's answer.
const ONCE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `compactd top` against the daemon at `socket`; returns the exit code.
pub fn run(socket: &Path, once: bool) -> i32 {
    if once {
        return run_once(socket);
    }
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        crate::print_err!(
            "top needs a terminal; use `compactd top --once` for a plain-text snapshot"
        );
        return EXIT_USAGE;
    }
    run_live(socket.to_owned())
}

/// `--once`: one snapshot, printed as plain columns.
fn run_once(socket: &Path) -> i32 {
    let snapshot = super::runtime::block_on(
        super::runtime::Shape::Client,
        client::snapshot(socket, ONCE_TIMEOUT),
    );
    let list = match snapshot {
        Ok(Ok(v)) => v,
        Err(e) => {
            crate::print_err!("{e}");
            return EXIT_FAILED;
        }
        Ok(Err(e)) => {
            crate::print_err!(
                "cannot reach the daemon at {}: {e} (is `compactd serve` running?)",
                socket.display()
            );
            return EXIT_FAILED;
        }
    };
    let now = client::now_ms();
    let mut m = model::TopModel::new();
    m.connected(now, &socket.display().to_string());
    if let Err(e) = m.apply_snapshot(&list, now) {
        crate::print_err!("{e}");
        return EXIT_FAILED;
    }
    write_stdout(&plain::table(&m.rows("", now)))
}

/// The live view: the connection on its own thread, the terminal on this one.
fn run_live(socket: PathBuf) -> i32 {
    let shared = Arc::new(Shared::default());
    let (commands, receiver) = tokio::sync::mpsc::channel(client::COMMAND_QUEUE);
    let stop = CancellationToken::new();
    let label = socket.display().to_string();
    let rt = match super::runtime::build(super::runtime::Shape::Client) {
        Ok(rt) => rt,
        Err(e) => {
            crate::print_err!("{e}");
            return EXIT_FAILED;
        }
    };
    let net = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::spawn(move || rt.block_on(client::run(socket, shared, receiver, stop)))
    };
    let outcome = match ratatui::try_init() {
        Ok(mut terminal) => {
            let r = screen_loop(&mut terminal, &shared, &commands, &label);
            ratatui::restore();
            r
        }
        Err(e) => Err(e),
    };
    stop.cancel();
    let _ = net.join();
    match outcome {
        Ok(()) => EXIT_OK,
        Err(e) => {
            crate::print_err!("terminal error: {e}");
            EXIT_FAILED
        }
    }
}

/// The terminal's key, as `top` reads it. Esc followed quickly by a key arrives as that key
/// with Alt; it is read as the two keys it was typed as.
fn keys_of(k: KeyEvent) -> Vec<Key> {
    if k.kind == KeyEventKind::Release {
        return Vec::new();
    }
    match k.code {
        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => vec![Key::Interrupt],
        KeyCode::Char(c) if k.modifiers.contains(KeyModifiers::ALT) => vec![Key::Esc, Key::Char(c)],
        _ => key_of(k).into_iter().collect(),
    }
}

fn key_of(k: KeyEvent) -> Option<Key> {
    Some(match k.code {
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

/// Draws and reads keys until the user quits.
fn screen_loop(
    terminal: &mut ratatui::DefaultTerminal,
    shared: &Shared,
    commands: &tokio::sync::mpsc::Sender<Command>,
    socket: &str,
) -> std::io::Result<()> {
    let palette = render::Palette::from_env();
    let mut ui = Ui::new();
    let mut redraw = true;
    let mut drawn = Instant::now();
    loop {
        redraw |= shared.take_dirty() || drawn.elapsed() >= TICK;
        if redraw {
            let view = {
                let m = shared.model.lock();
                render::View::capture(&m, &ui, socket, client::now_ms(), 64)
            };
            terminal.draw(|f| render::draw(f, &view, &ui, palette))?;
            drawn = Instant::now();
            redraw = false;
        }
        if !event::poll(FRAME)? {
            continue;
        }
        match event::read()? {
            Event::Key(k) => {
                for key in keys_of(k) {
                    let rows = shared.model.lock().rows(&ui.filter, client::now_ms());
                    let command = match ui.key(key, &rows) {
                        Action::Quit => return Ok(()),
                        Action::None => None,
                        Action::Compact(id) => Some(Command::Compact(id)),
                        Action::Abort(id) => Some(Command::Abort(id)),
                        Action::Preview(id) => {
                            shared.update(|m| m.preview_asked(&id));
                            Some(Command::Preview(id))
                        }
                    };
                    if let Some(c) = command {
                        send(shared, commands, c);
                    }
                }
                redraw = true;
            }
            Event::Resize(..) => redraw = true,
            _ => {}
        }
    }
}

/// Hands an action to the connection without ever waiting for it.
fn send(shared: &Shared, commands: &tokio::sync::mpsc::Sender<Command>, c: Command) {
    use tokio::sync::mpsc::error::TrySendError;
    let (session, why) = match commands.try_send(c) {
        Ok(()) => return,
        Err(TrySendError::Full(c)) => (c, "too many actions waiting: not sent"),
        Err(TrySendError::Closed(c)) => (c, "the connection has stopped: not sent"),
    };
    let id = match &session {
        Command::Compact(s) | Command::Preview(s) | Command::Abort(s) => s.clone(),
    };
    shared.update(|m| m.note(client::now_ms(), Some(&id), why.into(), model::Tone::Bad));
}
