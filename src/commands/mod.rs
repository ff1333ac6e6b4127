pub mod analyze;
pub mod run;
