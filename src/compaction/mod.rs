//! The pure compaction core: token accounting, cut points, preparation, file operations,
//! serialization, prompts, the plain reply types a summarizer returns, summary assembly, and the
//! recall footer that ends compactd's summaries. No I/O and no async: everything here is a plain
//! function of session data, so the conformance fixtures test it directly.

pub mod branch;
pub mod branch_index;
pub mod cut_point;
pub mod file_ops;
pub mod prepare;
pub mod projection;
pub mod prompts;
pub mod recall;
pub mod reply;
pub mod serialize;
pub mod summary;
pub mod tokens;

pub use branch_index::BranchIndex;
pub use prepare::{plan_compaction, prepare_compaction, NothingToCompact, Plan, Preparation};
pub use tokens::CompactionSettings;
