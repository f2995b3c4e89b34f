//! Draws `compactd top` with ratatui: a status line, the session table (a bar of context tokens
//! against the threshold and the window), the event pane, the key line, and the preview
//! pop-up. It reads a [`View`] captured from the model under its lock, so drawing (which may
//! wait on a slow terminal) never holds the lock the connection applies events under.
//!
//! With `NO_COLOR` set no colour is used at all: emphasis is bold, dim and reverse video only.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

use super::model::{self, EventLine, Link, Preview, RowState, Tone, TopModel};
use super::ui::{Mode, Ui};

/// Cells of the context bar.
const BAR: usize = 10;

/// What one frame shows, copied out of the model.
#[derive(Debug, Clone)]
pub struct View {
    pub socket: String,
    pub link: Link,
    pub rows: Vec<model::Row>,
    pub sessions: usize,
    /// The newest event lines, oldest first.
    pub events: Vec<EventLine>,
    pub preview: Option<Preview>,
    pub now_ms: i64,
}

impl View {
    /// Copies what a frame needs (at most `events` event lines).
    pub fn capture(m: &TopModel, ui: &Ui, socket: &str, now_ms: i64, events: usize) -> View {
        let preview = match &ui.mode {
            Mode::Preview(id) => m.preview(id).cloned(),
            _ => None,
        };
        let skip = m.events().len().saturating_sub(events);
        View {
            socket: socket.to_owned(),
            link: m.link().clone(),
            rows: m.rows(&ui.filter, now_ms),
            sessions: m.session_count(),
            events: m.events().skip(skip).cloned().collect(),
            preview,
            now_ms,
        }
    }
}

/// Styles, or none of them without colour.
#[derive(Debug, Clone, Copy)]
pub struct Palette {
    pub colour: bool,
}

impl Palette {
    /// Colour unless `NO_COLOR` is set to anything non-empty (https://no-color.org).
    pub fn from_env() -> Palette {
        Palette {
            colour: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }

    fn fg(self, c: Color) -> Style {
        if self.colour {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }

    fn tone(self, t: Tone) -> Style {
        match t {
            Tone::Info => Style::default(),
            Tone::Good => self.fg(Color::Green),
            Tone::Warn => self.fg(Color::Yellow),
            Tone::Bad => self.fg(Color::Red).add_modifier(Modifier::BOLD),
        }
    }

    /// How full the context is against its threshold.
    fn level(self, r: &model::Row) -> Style {
        match (r.tokens, r.threshold) {
            (Some(t), Some(th)) if th > 0.0 && t >= th => self.fg(Color::Red),
            (Some(t), Some(th)) if th > 0.0 && t >= 0.75 * th => self.fg(Color::Yellow),
            _ => self.fg(Color::Green),
        }
    }

    fn state(self, s: &RowState) -> Style {
        match s {
            RowState::Compacting { .. } | RowState::Busy => {
                self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
            }
            RowState::Speculating { .. } | RowState::SpeculationReady { .. } => {
                self.fg(Color::Blue)
            }
            RowState::Suppressed | RowState::Paused => {
                self.fg(Color::Magenta).add_modifier(Modifier::BOLD)
            }
            RowState::AutoOff | RowState::Idle => Style::default(),
        }
    }
}

/// The context cell: a bar of the window with the threshold marked, then the figures.
fn context_cell(r: &model::Row, p: Palette) -> Line<'static> {
    let (Some(tokens), Some(window)) = (r.tokens, r.window.filter(|w| *w > 0)) else {
        return Line::from(match r.tokens {
            Some(t) => format!("{} tokens (no model)", model::tokens(t)),
            None => "-".into(),
        });
    };
    let w = window as f64;
    let filled = ((tokens / w) * BAR as f64).round().clamp(0.0, BAR as f64) as usize;
    let mark = r
        .threshold
        .map(|th| ((th / w) * BAR as f64).floor().clamp(0.0, (BAR - 1) as f64) as usize);
    let mut bar = String::new();
    let mut rest = String::new();
    for i in 0..BAR {
        let c = if Some(i) == mark {
            '│'
        } else if i < filled {
            '█'
        } else {
            '░'
        };
        if i < filled {
            bar.push(c);
        } else {
            rest.push(c);
        }
    }
    let pct = r.percent().unwrap_or(0.0);
    Line::from(vec![
        Span::styled(bar, p.level(r)),
        Span::raw(rest),
        Span::styled(format!(" {pct:5.1}%"), p.level(r)),
        Span::raw(format!(
            " {}/{}",
            model::tokens(tokens),
            model::tokens(window as f64)
        )),
    ])
}

/// The last compaction in at most `width` characters: its parts (when, tokens before→after,
/// summarizer, duration) in that order, each whole or not at all, so a name is never cut
/// (`extractive` shown as `extrac`).
fn last_cell(r: &model::Row, width: usize) -> String {
    let Some(l) = &r.last else {
        return "-".into();
    };
    let mut parts = Vec::new();
    parts.push(match r.last_age_ms {
        Some(a) if a < 1000 => "just now".to_owned(),
        Some(a) => format!("{} ago", model::age(a)),
        None => "earlier".to_owned(),
    });
    parts.push(format!(
        "{}→{}",
        l.tokens_before
            .map(model::tokens)
            .unwrap_or_else(|| "?".into()),
        l.tokens_after
            .map(model::tokens)
            .unwrap_or_else(|| "?".into())
    ));
    if let Some(s) = &l.summarizer {
        // `provider/model`: the model says enough here (`--once` prints both).
        parts.push(s.rsplit('/').next().unwrap_or(s).to_owned());
    }
    if let Some(d) = l.duration_ms {
        parts.push(model::duration(d));
    }
    if let Some(h) = l.handoff {
        parts.push(format!("handoff {}", model::handoff(h)));
    }
    let mut cell = String::new();
    for part in parts {
        let needed = cell.chars().count() + usize::from(!cell.is_empty()) + part.chars().count();
        if needed > width {
            break;
        }
        if !cell.is_empty() {
            cell.push(' ');
        }
        cell.push_str(&part);
    }
    cell
}

/// `n session(s)`.
fn sessions(n: usize) -> String {
    if n == 1 {
        "1 session".to_owned()
    } else {
        format!("{n} sessions")
    }
}

fn clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| {
            t.with_timezone(&chrono::Local)
                .format("%H:%M:%S")
                .to_string()
        })
        .unwrap_or_default()
}

fn status_line(v: &View, p: Palette) -> Line<'static> {
    let head = Span::styled(
        "compactd top",
        Style::default().add_modifier(Modifier::BOLD),
    );
    let link = match &v.link {
        Link::Connecting => Span::raw("connecting…"),
        Link::Up => Span::styled("connected", p.fg(Color::Green)),
        Link::Down {
            attempts,
            error,
            retry_in_ms,
            ..
        } => Span::styled(
            format!(
                "daemon disconnected — reconnecting… (attempt {attempts}{}: {error})",
                retry_in_ms
                    .map(|ms| format!(", next in {}", model::duration(ms)))
                    .unwrap_or_default()
            ),
            p.fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
    };
    let shown = if v.rows.len() == v.sessions {
        sessions(v.sessions)
    } else {
        format!("{} of {}", v.rows.len(), sessions(v.sessions))
    };
    Line::from(vec![
        head,
        Span::raw(format!(" · {} · {shown} · ", v.socket)),
        link,
    ])
}

fn key_line(ui: &Ui, v: &View, selected: Option<&model::Row>) -> Line<'static> {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    match &ui.mode {
        Mode::Filter => Line::from(vec![
            Span::styled("filter: ", bold),
            Span::raw(ui.filter.clone()),
            Span::styled("▏", Style::default().add_modifier(Modifier::SLOW_BLINK)),
            Span::raw("   (Enter keeps it, Esc clears)"),
        ]),
        Mode::Confirm(id) => {
            let name = v
                .rows
                .iter()
                .find(|r| &r.session_id == id)
                .map(|r| format!(" ({})", r.name))
                .unwrap_or_default();
            Line::from(vec![Span::styled(
                format!("Compact {id}{name} now? [y/N]"),
                bold.add_modifier(Modifier::REVERSED),
            )])
        }
        Mode::Preview(_) | Mode::Normal => {
            let mut spans = Vec::new();
            for (k, what) in [
                ("c", "compact"),
                ("p", "preview"),
                ("a", "abort"),
                ("/", "filter"),
                ("↑↓", "select"),
                ("q", "quit"),
            ] {
                spans.push(Span::styled(k.to_owned(), bold));
                spans.push(Span::raw(format!(" {what}  ")));
            }
            if !ui.filter.is_empty() {
                spans.push(Span::raw(format!("[filter: {}]  ", ui.filter)));
            }
            if let Some(r) = selected {
                spans.push(Span::raw(r.path.clone()));
            }
            Line::from(spans)
        }
    }
}

/// A rectangle of `width` × `height` centred in `area` (clipped to it).
fn centred(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

/// Draws one frame.
pub fn draw(frame: &mut Frame, v: &View, ui: &Ui, p: Palette) {
    let area = frame.area();
    let events_height = (area.height / 3).clamp(3, 12);
    let [status, table_area, events_area, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(events_height),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(status_line(v, p)), status);

    let selected = ui.selected_index(&v.rows);
    // The state column as wide as its longest label (its header at least); the last
    // compaction gets what the others leave, its parts fitted whole.
    let state_width = v
        .rows
        .iter()
        .map(|r| r.state.label().chars().count())
        .max()
        .unwrap_or(0)
        .clamp("STATE".len(), 28);
    let fixed = [4, 18, 18, BAR + 21, state_width, 8];
    // Ratatui's default: one column of space between columns.
    let used = fixed.iter().sum::<usize>() + fixed.len();
    let last_width = usize::from(table_area.width).saturating_sub(used);
    let header = Row::new(
        [
            "SID",
            "SESSION",
            "MODEL",
            "CONTEXT (tokens · │ threshold)",
            "STATE",
            "LAST COMPACTION",
            "COST",
        ]
        .map(|h| Cell::from(h).style(Style::default().add_modifier(Modifier::BOLD))),
    );
    let rows: Vec<Row> = v
        .rows
        .iter()
        .map(|r| {
            let cost = r
                .last
                .as_ref()
                .and_then(|l| l.cost)
                .map(model::cost)
                .unwrap_or_else(|| "-".into());
            let row = Row::new(vec![
                Cell::from(r.session_id.clone()),
                Cell::from(r.name.clone()),
                Cell::from(r.model.clone().unwrap_or_else(|| "-".into())),
                Cell::from(context_cell(r, p)),
                Cell::from(Span::styled(r.state.label(), p.state(&r.state))),
                Cell::from(last_cell(r, last_width)),
                Cell::from(cost),
            ]);
            if r.stale {
                row.style(Style::default().add_modifier(Modifier::DIM))
            } else {
                row
            }
        })
        .collect();
    let widths = [
        Constraint::Length(fixed[0] as u16),
        Constraint::Length(fixed[1] as u16),
        Constraint::Length(fixed[2] as u16),
        Constraint::Length(fixed[3] as u16),
        Constraint::Length(fixed[4] as u16),
        Constraint::Fill(1),
        Constraint::Length(fixed[5] as u16),
    ];
    let empty = v.rows.is_empty();
    let table = Table::new(rows, widths)
        .header(header)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .block(Block::default().borders(Borders::BOTTOM));
    let mut state = TableState::default().with_selected(selected);
    frame.render_stateful_widget(table, table_area, &mut state);
    if empty {
        let text = if v.sessions == 0 {
            "no open sessions"
        } else {
            "no session matches the filter"
        };
        let below_header = Rect {
            y: table_area.y + 1,
            height: table_area.height.saturating_sub(1),
            ..table_area
        };
        frame.render_widget(
            Paragraph::new(Span::styled(
                text,
                Style::default().add_modifier(Modifier::DIM),
            )),
            below_header,
        );
    }

    let lines: Vec<Line> = v
        .events
        .iter()
        .rev()
        .take(events_height.saturating_sub(1) as usize)
        .rev()
        .map(|e| {
            let mut spans = vec![Span::styled(
                format!("{} ", clock(e.at_ms)),
                Style::default().add_modifier(Modifier::DIM),
            )];
            if let Some(s) = &e.session_id {
                spans.push(Span::styled(
                    format!("{s} "),
                    Style::default().add_modifier(Modifier::BOLD),
                ));
            }
            spans.push(Span::styled(e.text.clone(), p.tone(e.tone)));
            Line::from(spans)
        })
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::TOP).title(Span::styled(
            " events ",
            Style::default().add_modifier(Modifier::BOLD),
        ))),
        events_area,
    );
    let sel = selected.and_then(|i| v.rows.get(i));
    frame.render_widget(Paragraph::new(key_line(ui, v, sel)), keys);

    if let Mode::Preview(id) = &ui.mode {
        let body: Vec<Line> = match &v.preview {
            None | Some(Preview::Loading) => vec![Line::from("asking the daemon…")],
            Some(Preview::Failed(e)) => vec![Line::from(Span::styled(
                format!("preview refused: {e}"),
                p.tone(Tone::Bad),
            ))],
            Some(Preview::Ready(lines)) => lines.iter().map(|l| Line::from(l.clone())).collect(),
        };
        let height = body.len() as u16 + 3;
        let popup = centred(area, area.width.saturating_sub(8).min(100), height);
        frame.render_widget(Clear, popup);
        frame.render_widget(
            Paragraph::new(body).wrap(Wrap { trim: false }).block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(format!(" preview of {id}: what `c` would do "))
                    .title_bottom(" Esc closes "),
            ),
            popup,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use serde_json::json;

    fn view_of(m: &TopModel, ui: &Ui) -> View {
        View::capture(m, ui, "/run/c.sock", 10_000, 50)
    }

    fn screen(v: &View, ui: &Ui, p: Palette, w: u16, h: u16) -> (String, ratatui::buffer::Buffer) {
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        t.draw(|f| draw(f, v, ui, p)).expect("draw");
        let buf = t.backend().buffer().clone();
        let mut text = String::new();
        for y in 0..buf.area.height {
            for x in 0..buf.area.width {
                text.push_str(buf[(x, y)].symbol());
            }
            text.push('\n');
        }
        (text, buf)
    }

    fn model() -> TopModel {
        let mut m = TopModel::new();
        m.connected(0, "/run/c.sock");
        m.apply_snapshot(
            &json!([
                {"sessionId": "s1", "path": "/p/x_1-aaaaaaaa.jsonl", "cwd": "/w/api", "isCompacting": false,
                 "model": {"provider": "a", "id": "m1", "contextWindow": 10000, "maxTokens": 1},
                 "contextTokens": 9000, "threshold": 8000, "autoCompaction": "on"},
                {"sessionId": "s2", "path": "/p/x_1-bbbbbbbb.jsonl", "cwd": "/w/web", "isCompacting": false,
                 "model": {"provider": "a", "id": "m1", "contextWindow": 10000, "maxTokens": 1},
                 "contextTokens": 1000, "threshold": 8000, "autoCompaction": "on"}
            ]),
            0,
        )
        .unwrap();
        m.apply_event(
            "compaction_start",
            &json!({"sessionId": "s1", "reason": "threshold"}),
            9_000,
        );
        m
    }

    #[test]
    fn rows_events_and_the_status_line_are_drawn() {
        let m = model();
        let ui = Ui::new();
        let (text, _) = screen(&view_of(&m, &ui), &ui, Palette { colour: true }, 140, 24);
        assert!(
            text.contains("compactd top · /run/c.sock · 2 sessions · connected"),
            "{text}"
        );
        assert!(text.contains("api/aaaaaaaa"), "{text}");
        assert!(text.contains(" 90.0% 9.0k/10.0k"), "{text}");
        assert!(text.contains(" 10.0% 1.0k/10.0k"), "{text}");
        assert!(text.contains("compacting threshold 1.0s"), "{text}");
        assert!(text.contains("s1 compaction started (threshold)"), "{text}");
        assert!(text.contains("c compact"), "{text}");
    }

    /// One session is "1 session"; the last compaction's parts are shown whole or not at
    /// all (a summarizer name is never cut), and at a common width it fits with its name.
    #[test]
    fn counts_are_singular_and_the_last_compaction_is_never_cut_mid_word() {
        let mut m = TopModel::new();
        m.connected(0, "/run/c.sock");
        m.apply_snapshot(
            &json!([{"sessionId": "s1", "path": "/p/x_1-aaaaaaaa.jsonl", "cwd": "/w/api",
                "isCompacting": false,
                "model": {"provider": "a", "id": "m1", "contextWindow": 10000, "maxTokens": 1},
                "contextTokens": 3000, "threshold": 8000, "autoCompaction": "on",
                "lastCompaction": {"entryId": "c1", "timestamp": "1970-01-01T00:00:05.000Z",
                    "tokensBefore": 40000, "tokensAfter": 3000, "summarizer": "extractive",
                    "durationMs": 120}}]),
            10_000,
        )
        .unwrap();
        let ui = Ui::new();
        let (text, _) = screen(&view_of(&m, &ui), &ui, Palette { colour: false }, 120, 20);
        assert!(text.contains(" · 1 session · "), "{text}");
        assert!(text.contains("5s ago 40.0k→3.0k extractive"), "{text}");
        for width in 80..120 {
            let (text, _) = screen(&view_of(&m, &ui), &ui, Palette { colour: false }, width, 20);
            let row = text
                .lines()
                .find(|l| l.starts_with("s1"))
                .unwrap_or_default();
            let cut = ["extract ", "extrac ", "extra ", "ext "]
                .iter()
                .any(|part| format!("{row} ").contains(part));
            assert!(!cut, "width {width}: {row}");
        }
    }

    #[test]
    fn no_color_means_no_colour_at_all() {
        let m = model();
        let ui = Ui::new();
        let v = view_of(&m, &ui);
        let (_, coloured) = screen(&v, &ui, Palette { colour: true }, 140, 24);
        let used = |b: &ratatui::buffer::Buffer| {
            b.content()
                .iter()
                .any(|c| c.fg != Color::Reset || c.bg != Color::Reset)
        };
        assert!(used(&coloured), "colour is used by default");
        let (text, plain) = screen(&v, &ui, Palette { colour: false }, 140, 24);
        assert!(!used(&plain), "NO_COLOR: no cell has a colour");
        assert!(text.contains("compacting threshold"), "{text}");
    }

    #[test]
    fn the_layout_follows_the_size_and_the_prompts_show() {
        let m = model();
        let mut ui = Ui::new();
        let rows = m.rows("", 10_000);
        ui.key(super::super::ui::Key::Char('c'), &rows);
        for (w, h) in [(60, 12), (200, 50), (20, 5)] {
            let (text, buf) = screen(&view_of(&m, &ui), &ui, Palette { colour: false }, w, h);
            assert_eq!((buf.area.width, buf.area.height), (w, h));
            if w >= 60 {
                assert!(
                    text.contains("Compact s1 (api/aaaaaaaa) now? [y/N]"),
                    "{text}"
                );
            }
        }
        let mut ui = Ui::new();
        ui.mode = Mode::Preview("s1".into());
        let mut m = model();
        m.preview_asked("s1");
        m.preview_replied(
            "s1",
            Ok(&json!({"nothingToCompact": "Nothing to compact (session too small)"})),
        );
        let (text, _) = screen(&view_of(&m, &ui), &ui, Palette { colour: false }, 120, 24);
        assert!(text.contains("preview of s1"), "{text}");
        assert!(
            text.contains("Nothing to compact: Nothing to compact (session too small)"),
            "{text}"
        );
    }
}
