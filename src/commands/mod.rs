pub mod analyze;
pub mod call;
pub mod pack;
pub mod plot;
pub mod run;
pub mod serve;
pub mod simulate;
pub mod sizing;
