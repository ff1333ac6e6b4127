//! Site-wide import usage (docs/usage.md, "Site-wide import usage"): the hook an admin installs
//! once per Python installation (`hook`), the lines it writes (`log`), and what `lfm usage
//! --site DIR` makes of every log under a directory (`aggregate`).

pub mod aggregate;
pub mod hook;
pub mod log;

pub use aggregate::{aggregate, Filter, SiteUsage};
