//! `lfm usage`: what recorded calls imported, and against their closures (docs/usage.md).

use std::io::Write;

use lfm_sizing::history::usage::{Filter, Usage};

use crate::cli::{HistoryFormat, UsageArgs};
use crate::monitoring::open_history as open;

const EXIT_FAILED: i32 = 1;
const EXIT_USAGE: i32 = 2;

pub fn usage(args: UsageArgs) -> i32 {
    let since = match args.since.as_deref().map(parse_since).transpose() {
        Ok(since) => since,
        Err(error) => {
            eprintln!("error: --since {error}");
            return EXIT_USAGE;
        }
    };
    if super::site_usage::wanted(&args.site) {
        return super::site_usage::site_usage(&args, since);
    }
    let filter = Filter {
        category: args.category.clone(),
        since,
    };
    let usage = match open(args.history.as_ref()).and_then(|h| h.usage(&filter)) {
        Ok(usage) => usage,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_FAILED;
        }
    };
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        HistoryFormat::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&usage).unwrap_or_default()
        ),
        HistoryFormat::Csv => write_csv(&mut out, &usage),
        HistoryFormat::Table => write_table(&mut out, &usage),
    };
    if written.is_err() {
        return EXIT_FAILED;
    }
    0
}

/// A duration ago (`7d`), a UTC date (`2026-11-01`), or a Unix time.
pub fn parse_since(text: &str) -> Result<f64, String> {
    if let Some(date) = parse_date(text) {
        return Ok(date);
    }
    if let Ok(time) = text.parse::<f64>() {
        if time > 1e9 && time.is_finite() {
            return Ok(time);
        }
    }
    let ago = lfm_monitor::limits::parse_duration("--since", text).map_err(|_| {
        format!("{text:?}: not a duration (7d, 12h), a date (2026-11-01) or a Unix time")
    })?;
    Ok(now() - ago)
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `YYYY-MM-DD` at 00:00 UTC, as Unix time; None for anything else (2026-02-30 too).
fn parse_date(text: &str) -> Option<f64> {
    if text.len() != 10 {
        return None;
    }
    let date = jiff::civil::Date::strptime("%Y-%m-%d", text).ok()?;
    let midnight =
        jiff::tz::TimeZone::UTC.to_timestamp(date.to_datetime(jiff::civil::Time::midnight()));
    Some(midnight.ok()?.as_second() as f64)
}

/// `2026-11-23 10:40Z`: Unix time as a UTC minute.
pub(crate) fn utc(time: f64) -> String {
    match jiff::Timestamp::from_second(time.floor() as i64) {
        Ok(at) => at.strftime("%Y-%m-%d %H:%MZ").to_string(),
        Err(_) => format!("{time} (Unix time)"),
    }
}

fn write_table(out: &mut impl Write, usage: &Usage) -> std::io::Result<()> {
    let scope = match (&usage.category, usage.since) {
        (Some(c), Some(s)) => format!(" (category {c}, since {})", utc(s)),
        (Some(c), None) => format!(" (category {c})"),
        (None, Some(s)) => format!(" (since {})", utc(s)),
        (None, None) => String::new(),
    };
    writeln!(out, "{} calls{scope}", usage.calls)?;
    writeln!(out)?;
    if usage.not_in_closure.is_empty() {
        writeln!(out, "Imported but not in the closure: none")?;
    } else {
        writeln!(
            out,
            "IMPORTED BUT NOT IN THE CLOSURE ({}): the analyzer missed these; pack them by hand",
            usage.not_in_closure.len()
        )?;
        for miss in &usage.not_in_closure {
            writeln!(
                out,
                "  {}  {}  in {} calls of {} ({}), last: history row {} at {}",
                miss.module,
                miss.distribution.as_deref().unwrap_or("-"),
                miss.calls,
                miss.target,
                miss.category,
                miss.last_run,
                utc(miss.last_used)
            )?;
        }
    }
    writeln!(out)?;
    write_used(out, "distribution", &usage.distributions, false)?;
    writeln!(out)?;
    write_used(out, "module", &usage.modules, true)?;
    writeln!(out)?;
    writeln!(out, "Packed but never imported (candidates to slim):")?;
    for unused in &usage.never_imported {
        writeln!(
            out,
            "  {} ({} calls of {}): distributions: {}; modules: {}",
            unused.category,
            unused.calls,
            unused.targets.join(", "),
            list_or_none(&unused.distributions),
            list_or_none(&unused.modules)
        )?;
    }
    if !usage.no_closure.is_empty() {
        writeln!(
            out,
            "  (no closure to compare with for some calls of: {})",
            usage.no_closure.join(", ")
        )?;
    }
    Ok(())
}

pub(crate) fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

fn write_used(
    out: &mut impl Write,
    what: &str,
    used: &[lfm_sizing::history::usage::Used],
    with_distribution: bool,
) -> std::io::Result<()> {
    let width = used
        .iter()
        .map(|u| u.name.len())
        .max()
        .unwrap_or(0)
        .max(what.len());
    write!(out, "{what:width$}")?;
    if with_distribution {
        write!(out, "  {:24}", "distribution")?;
    }
    writeln!(out, "  {:>6}  {:17}  categories", "calls", "last used")?;
    for u in used {
        write!(out, "{:width$}", u.name)?;
        if with_distribution {
            write!(out, "  {:24}", u.distribution.as_deref().unwrap_or("-"))?;
        }
        writeln!(
            out,
            "  {:>6}  {:17}  {}",
            u.calls,
            utc(u.last_used),
            u.categories.join(",")
        )?;
    }
    Ok(())
}

/// One table: `section,category,name,distribution,calls,last_used`.
fn write_csv(out: &mut impl Write, usage: &Usage) -> std::io::Result<()> {
    let mut csv = csv::Writer::from_writer(out);
    csv.write_record([
        "section",
        "category",
        "name",
        "distribution",
        "calls",
        "last_used",
    ])?;
    let mut row = |section: &str,
                   category: &str,
                   name: &str,
                   dist: Option<&str>,
                   calls: String,
                   last: String| {
        csv.write_record([section, category, name, dist.unwrap_or(""), &calls, &last])
    };
    for m in &usage.not_in_closure {
        let last = format!("{:.3}", m.last_used);
        row(
            "not_in_closure",
            &m.category,
            &m.module,
            m.distribution.as_deref(),
            m.calls.to_string(),
            last,
        )?;
    }
    for (section, used) in [
        ("distribution", &usage.distributions),
        ("module", &usage.modules),
    ] {
        for u in used {
            let categories = u.categories.join(";");
            let last = format!("{:.3}", u.last_used);
            row(
                section,
                &categories,
                &u.name,
                u.distribution.as_deref(),
                u.calls.to_string(),
                last,
            )?;
        }
    }
    for unused in &usage.never_imported {
        for dist in &unused.distributions {
            row(
                "never_imported_distribution",
                &unused.category,
                dist,
                Some(dist),
                String::new(),
                String::new(),
            )?;
        }
        for module in &unused.modules {
            row(
                "never_imported_module",
                &unused.category,
                module,
                None,
                String::new(),
                String::new(),
            )?;
        }
    }
    csv.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_times_round_trip_through_the_civil_calendar() {
        assert_eq!(parse_date("1970-01-01"), Some(0.0));
        assert_eq!(parse_date("2026-11-23"), Some(1_795_392_000.0));
        assert_eq!(utc(1_795_392_000.0 + 3600.0 * 10.5), "2026-11-23 10:30Z");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00Z");
        assert!(parse_date("2026-13-01").is_none());
        assert!(parse_date("2026-02-29").is_none());
        assert!(parse_date("26-02-2026").is_none());
        assert!(parse_since("yesterday").is_err());
        assert!(parse_since("7d").unwrap() < now() - 6.0 * 86_400.0);
    }
}
