pub mod analyze;
pub mod run;
pub mod pack;
