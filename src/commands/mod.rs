pub mod analyze;
pub mod call;
pub mod pack;
pub mod run;
pub mod serve;
pub mod serve_sizing;
pub mod simulate;
pub mod sizing;
