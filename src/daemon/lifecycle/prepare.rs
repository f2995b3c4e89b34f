//! The one preparation of every compaction the daemon runs (manual, threshold, overflow, a
//! speculation, an update on top of a claimed one): Pi's `prepareCompaction` over the live
//! branch, or on top of a speculative compaction placed where it would have been installed,
//! with compactd's own additions taken out of the previous summary.
//!
//! Why one place: the previous summary a model sees must never carry compactd's `## Pinned`
//! section or its recall footer (compactd puts both back itself afterwards, so the model never
//! rewrites the pins and footers never pile up). A preparation made anywhere else would forget
//! that on one path.

use crate::compaction::prepare::{
    prepare_branch, prepare_on_top, NothingToCompact, NothingToCompactDetail, Preparation,
};
use crate::compaction::CompactionSettings;
use crate::session::Entry;

use super::super::session::SessionState;

/// Pi's refusal, with (beyond Pi) its explanation.
pub(super) type Refusal = (NothingToCompact, Box<NothingToCompactDetail>);

/// The preparation of `state`'s branch as it is now, or why there is nothing to compact.
pub(super) fn of_branch(
    state: &SessionState,
    settings: &CompactionSettings,
) -> Result<Preparation, Refusal> {
    let view = state.view();
    let mut prep = prepare_branch(state.rules, &view, &state.index, settings).map_err(|n| {
        let detail = n.detail(&view, &state.index, settings);
        (n, Box::new(detail))
    })?;
    strip_additions(&mut prep);
    Ok(prep)
}

/// The preparation of an update on top of a speculative compaction `virtual_entry` placed after
/// `path[at]` (see [`prepare_on_top`]); `None` when there is nothing more to summarize.
pub(super) fn on_top(
    version: crate::session::PiVersion,
    path: &[&Entry],
    at: usize,
    virtual_entry: &Entry,
    settings: &CompactionSettings,
) -> Option<Preparation> {
    let mut prep = prepare_on_top(version, path, at, virtual_entry, settings).ok()?;
    strip_additions(&mut prep);
    Some(prep)
}

/// Takes compactd's own additions out of a preparation's previous summary: the `## Pinned`
/// section and the recall footer.
fn strip_additions(prep: &mut Preparation) {
    if let Some(prev) = prep.plan.previous_summary.as_mut() {
        if prev.contains(super::super::pins::HEADING) {
            *prev = super::super::pins::strip_section(prev);
        }
        let body = crate::compaction::recall::strip_recall_footer(prev);
        if body.len() != prev.len() {
            *prev = body.to_owned();
        }
    }
}
