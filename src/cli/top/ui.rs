//! What the keys do in `compactd top`: selection, the filter, the confirmation before a
//! compaction and the preview pop-up. Pure: keys in (already translated from the terminal's
//! events), [`Action`]s out for the connection to carry out.

use super::model::Row;

/// A key, as far as `top` cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    Home,
    End,
    Enter,
    Esc,
    Backspace,
    /// Ctrl-C: quits from anywhere.
    Interrupt,
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    Compact(String),
    Preview(String),
    Abort(String),
}

/// What the keys currently act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// Typing a filter (applied as it is typed).
    Filter,
    /// `c` was pressed: compact this session on `y`.
    Confirm(String),
    /// The preview of this session is shown.
    Preview(String),
}

/// The view's interactive state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ui {
    /// The selected session, by id (stable while rows come and go).
    pub selected: Option<String>,
    pub filter: String,
    pub mode: Mode,
}

impl Default for Ui {
    fn default() -> Self {
        Ui::new()
    }
}

impl Ui {
    pub fn new() -> Ui {
        Ui {
            selected: None,
            filter: String::new(),
            mode: Mode::Normal,
        }
    }

    /// The selected row's index among `rows`; a selection that left (closed, filtered out)
    /// falls back to the first row.
    pub fn selected_index(&self, rows: &[Row]) -> Option<usize> {
        if rows.is_empty() {
            return None;
        }
        Some(
            self.selected
                .as_ref()
                .and_then(|s| rows.iter().position(|r| &r.session_id == s))
                .unwrap_or(0),
        )
    }

    fn selected_id(&self, rows: &[Row]) -> Option<String> {
        self.selected_index(rows)
            .map(|i| rows[i].session_id.clone())
    }

    fn move_to(&mut self, rows: &[Row], index: usize) {
        if let Some(r) = rows.get(index) {
            self.selected = Some(r.session_id.clone());
        }
    }

    /// Handles one key against the rows on screen.
    pub fn key(&mut self, key: Key, rows: &[Row]) -> Action {
        if key == Key::Interrupt {
            return Action::Quit;
        }
        match self.mode.clone() {
            Mode::Confirm(id) => {
                self.mode = Mode::Normal;
                if matches!(key, Key::Char('y') | Key::Char('Y')) {
                    return Action::Compact(id);
                }
                Action::None
            }
            Mode::Preview(_) => {
                if matches!(
                    key,
                    Key::Esc | Key::Enter | Key::Char('q') | Key::Char('p') | Key::Char(' ')
                ) {
                    self.mode = Mode::Normal;
                }
                Action::None
            }
            Mode::Filter => {
                match key {
                    Key::Char(c) => self.filter.push(c),
                    Key::Backspace => {
                        self.filter.pop();
                    }
                    Key::Enter => self.mode = Mode::Normal,
                    Key::Esc => {
                        self.filter.clear();
                        self.mode = Mode::Normal;
                    }
                    _ => {}
                }
                Action::None
            }
            Mode::Normal => self.normal_key(key, rows),
        }
    }

    fn normal_key(&mut self, key: Key, rows: &[Row]) -> Action {
        let at = self.selected_index(rows);
        match key {
            Key::Char('q') => return Action::Quit,
            Key::Up | Key::Char('k') => {
                if let Some(i) = at {
                    self.move_to(rows, i.saturating_sub(1));
                }
            }
            Key::Down | Key::Char('j') => {
                if let Some(i) = at {
                    self.move_to(rows, (i + 1).min(rows.len() - 1));
                }
            }
            Key::Home | Key::Char('g') => self.move_to(rows, 0),
            Key::End | Key::Char('G') => self.move_to(rows, rows.len().saturating_sub(1)),
            Key::Char('/') => self.mode = Mode::Filter,
            Key::Esc => self.filter.clear(),
            Key::Char('c') => {
                if let Some(id) = self.selected_id(rows) {
                    self.mode = Mode::Confirm(id);
                }
            }
            Key::Char('p') => {
                if let Some(id) = self.selected_id(rows) {
                    self.mode = Mode::Preview(id.clone());
                    return Action::Preview(id);
                }
            }
            Key::Char('a') => {
                if let Some(id) = self.selected_id(rows) {
                    return Action::Abort(id);
                }
            }
            _ => {}
        }
        Action::None
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::RowState;
    use super::*;

    fn rows(ids: &[&str]) -> Vec<Row> {
        ids.iter()
            .map(|id| Row {
                session_id: (*id).to_owned(),
                name: format!("p/{id}"),
                path: String::new(),
                model: None,
                tokens: None,
                threshold: None,
                window: None,
                state: RowState::Idle,
                last: None,
                last_age_ms: None,
                stale: false,
            })
            .collect()
    }

    #[test]
    fn compact_needs_a_confirmation() {
        let r = rows(&["s1", "s2", "s3"]);
        let mut ui = Ui::new();
        assert_eq!(ui.key(Key::Down, &r), Action::None);
        assert_eq!(ui.key(Key::Char('c'), &r), Action::None);
        assert_eq!(ui.mode, Mode::Confirm("s2".into()));
        assert_eq!(ui.key(Key::Char('y'), &r), Action::Compact("s2".into()));
        assert_eq!(ui.mode, Mode::Normal);
        ui.key(Key::Char('c'), &r);
        assert_eq!(
            ui.key(Key::Char('n'), &r),
            Action::None,
            "anything but y cancels"
        );
        assert_eq!(ui.mode, Mode::Normal);
        ui.key(Key::Char('c'), &r);
        assert_eq!(
            ui.key(Key::Char('q'), &r),
            Action::None,
            "q cancels, not quits"
        );
        assert_eq!(ui.key(Key::Char('q'), &r), Action::Quit);
    }

    #[test]
    fn selection_moves_within_the_rows_and_survives_their_changes() {
        let r = rows(&["s1", "s2", "s3"]);
        let mut ui = Ui::new();
        assert_eq!(ui.selected_index(&r), Some(0));
        ui.key(Key::Up, &r);
        assert_eq!(ui.selected_index(&r), Some(0));
        for _ in 0..5 {
            ui.key(Key::Char('j'), &r);
        }
        assert_eq!(ui.selected.as_deref(), Some("s3"));
        // s1 closed: s3 stays selected at its new index.
        let fewer = rows(&["s2", "s3"]);
        assert_eq!(ui.selected_index(&fewer), Some(1));
        // s3 closed: the first row is selected.
        assert_eq!(ui.selected_index(&rows(&["s2"])), Some(0));
        assert_eq!(ui.selected_index(&[]), None);
        assert_eq!(
            ui.key(Key::Char('c'), &[]),
            Action::None,
            "nothing selected"
        );
        assert_eq!(ui.mode, Mode::Normal);
        ui.key(Key::Char('g'), &r);
        assert_eq!(ui.selected.as_deref(), Some("s1"));
        ui.key(Key::End, &r);
        assert_eq!(ui.selected.as_deref(), Some("s3"));
    }

    #[test]
    fn the_filter_is_typed_applied_and_cleared() {
        let r = rows(&["s1"]);
        let mut ui = Ui::new();
        ui.key(Key::Char('/'), &r);
        for c in "apix".chars() {
            assert_eq!(
                ui.key(Key::Char(c), &r),
                Action::None,
                "q, c… are text here"
            );
        }
        ui.key(Key::Backspace, &r);
        assert_eq!(ui.filter, "api");
        ui.key(Key::Enter, &r);
        assert_eq!(ui.mode, Mode::Normal);
        assert_eq!(ui.filter, "api");
        ui.key(Key::Esc, &r);
        assert_eq!(ui.filter, "");
        ui.key(Key::Char('/'), &r);
        ui.key(Key::Char('z'), &r);
        ui.key(Key::Esc, &r);
        assert_eq!((ui.filter.as_str(), &ui.mode), ("", &Mode::Normal));
    }

    #[test]
    fn preview_and_abort_act_on_the_selected_session() {
        let r = rows(&["s1", "s2"]);
        let mut ui = Ui::new();
        ui.key(Key::Down, &r);
        assert_eq!(ui.key(Key::Char('p'), &r), Action::Preview("s2".into()));
        assert_eq!(ui.mode, Mode::Preview("s2".into()));
        assert_eq!(
            ui.key(Key::Char('a'), &r),
            Action::None,
            "the pop-up has the keys"
        );
        ui.key(Key::Esc, &r);
        assert_eq!(ui.key(Key::Char('a'), &r), Action::Abort("s2".into()));
        assert_eq!(ui.key(Key::Interrupt, &r), Action::Quit);
        ui.key(Key::Char('/'), &r);
        assert_eq!(ui.key(Key::Interrupt, &r), Action::Quit, "from anywhere");
    }
}
