pub mod analyze;
pub mod pack;
pub mod run;
