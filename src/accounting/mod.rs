//! Beyond Pi: what compactions cost and save, in tokens and (with prices) in US dollars. Pure
//! arithmetic over usage the providers reported and the estimates the core makes; no I/O.
//!
//! - [`prices`]: USD per million tokens by model, from the configuration or a built-in table;
//! - [`cost`]: tokens of a set of calls and their price ([`Cost`]);
//! - [`economics`]: what a compaction due now would cost and save (`previewCompaction`);
//! - [`calibration`]: the ratio of the provider's token counts to compactd's chars/4 estimate,
//!   learned per model from replies.

pub mod calibration;
pub mod cost;
pub mod economics;
pub mod prices;

pub use calibration::Calibration;
pub use cost::Cost;
pub use economics::Economics;
pub use prices::{Price, PriceTable};
