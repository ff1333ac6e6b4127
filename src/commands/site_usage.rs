//! `lfm usage --site DIR`, `--install-hook PREFIX`, `--remove-hook PREFIX`: the site-wide half
//! of `lfm usage` (lfm-usage; docs/usage.md "Site-wide import usage").

use std::io::Write;

use lfm_usage::aggregate::{SiteUsage, Used};
use lfm_usage::{hook, Filter};

use super::usage::{list_or_none, utc};
use crate::cli::{HistoryFormat, SiteUsageArgs, UsageArgs};

const EXIT_FAILED: i32 = 1;

/// Whether the flags ask for the site-wide half.
pub fn wanted(site: &SiteUsageArgs) -> bool {
    site.site.is_some() || site.install_hook.is_some() || site.remove_hook.is_some()
}

pub fn site_usage(args: &UsageArgs, since: Option<f64>) -> i32 {
    let site = &args.site;
    let done = if let Some(prefix) = &site.remove_hook {
        hook::remove(prefix).map(|changed| say_changed("removed", &changed))
    } else if let (Some(prefix), Some(dir)) = (&site.install_hook, &site.site) {
        if !dir.is_dir() {
            eprintln!(
                "warning: {} is not a directory yet: processes log nothing until it is \
                 (docs/usage.md: make it root-owned, mode 1733)",
                dir.display()
            );
        }
        hook::install(prefix, dir).map(|changed| say_changed("wrote", &changed))
    } else {
        report(args, since)
    };
    match done {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("error: {error}");
            EXIT_FAILED
        }
    }
}

fn say_changed(what: &str, paths: &[std::path::PathBuf]) {
    if paths.is_empty() {
        println!("no hook there: nothing {what}");
    }
    for path in paths {
        println!("{what} {}", path.display());
    }
}

fn report(args: &UsageArgs, since: Option<f64>) -> Result<(), String> {
    let dir = args.site.site.as_ref().expect("wanted() checked --site");
    let usage = lfm_usage::aggregate(dir, &Filter { since })?;
    for bad in &usage.bad_lines {
        eprintln!("warning: skipped {bad}");
    }
    if usage.bad_line_count > usage.bad_lines.len() {
        eprintln!(
            "warning: skipped {} more lines that are not whole lfm-site lines",
            usage.bad_line_count - usage.bad_lines.len()
        );
    }
    if let Some(svg) = &args.site.plot {
        crate::plots::site_usage::plot(&usage, svg)?;
    }
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        HistoryFormat::Json => serde_json::to_writer_pretty(&mut out, &usage)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out)),
        HistoryFormat::Csv => write_csv(&mut out, &usage),
        HistoryFormat::Table => write_table(&mut out, &usage),
    };
    written.map_err(|e| format!("writing the report: {e}"))
}

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

fn write_table(out: &mut impl Write, usage: &SiteUsage) -> std::io::Result<()> {
    let since = usage
        .since
        .map_or(String::new(), |s| format!(" since {}", utc(s)));
    writeln!(
        out,
        "{} processes of {} users on {} hosts{since} ({} batch), {} lines in {} files under {}",
        usage.processes,
        usage.users,
        usage.hosts,
        percent(usage.batch_share),
        usage.lines,
        usage.files,
        usage.directory.display()
    )?;
    let pythons: Vec<String> = usage
        .pythons
        .iter()
        .map(|(python, n)| format!("{python} ({n})"))
        .collect();
    writeln!(out, "Python versions: {}", list_or_none(&pythons))?;
    writeln!(out)?;
    write_used(out, "distribution", &usage.distributions, false)?;
    writeln!(out)?;
    write_used(out, "module", &usage.modules, true)?;
    writeln!(out)?;
    writeln!(
        out,
        "Installed but imported by no logged process (candidates to drop):"
    )?;
    for unused in &usage.never_imported {
        let listed = if unused.listed {
            list_or_none(&unused.distributions)
        } else {
            "(not readable from this host)".into()
        };
        writeln!(out, "  {}: {listed}", unused.installation)?;
    }
    Ok(())
}

fn write_used(
    out: &mut impl Write,
    what: &str,
    used: &[Used],
    with_distribution: bool,
) -> std::io::Result<()> {
    let width = used.iter().map(|u| u.name.len()).chain([what.len()]).max();
    let width = width.unwrap_or(0);
    let pythons = used.iter().map(|u| u.pythons.join(",").len()).chain([7]);
    let pythons_width = pythons.max().unwrap_or(7);
    let column = |name: &str| {
        if with_distribution {
            format!("{name:20}  ")
        } else {
            String::new()
        }
    };
    writeln!(
        out,
        "{what:width$}  {}{:>5}  {:>9}  {:>5}  {:>5}  {:17}  {:pythons_width$}  versions",
        column("distribution"),
        "users",
        "processes",
        "hosts",
        "batch",
        "last seen",
        "pythons"
    )?;
    for u in used {
        let line = format!(
            "{:width$}  {}{:>5}  {:>9}  {:>5}  {:>5}  {:17}  {:pythons_width$}  {}",
            u.name,
            column(u.distribution.as_deref().unwrap_or("-")),
            u.users,
            u.processes,
            u.hosts,
            percent(u.batch_share),
            utc(u.last_seen),
            u.pythons.join(","),
            u.versions.join(",")
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// One table: `section,name,distribution,users,processes,hosts,batch_share,versions,pythons,
/// last_seen`; never-imported distributions have only section, name (the distribution) and
/// distribution (its installation).
fn write_csv(out: &mut impl Write, usage: &SiteUsage) -> std::io::Result<()> {
    let mut writer = csv::Writer::from_writer(out);
    writer.write_record([
        "section",
        "name",
        "distribution",
        "users",
        "processes",
        "hosts",
        "batch_share",
        "versions",
        "pythons",
        "last_seen",
    ])?;
    for (section, used) in [
        ("distribution", &usage.distributions),
        ("module", &usage.modules),
    ] {
        for u in used {
            writer.write_record([
                section,
                &u.name,
                u.distribution.as_deref().unwrap_or(""),
                &u.users.to_string(),
                &u.processes.to_string(),
                &u.hosts.to_string(),
                &format!("{:.4}", u.batch_share),
                &u.versions.join(";"),
                &u.pythons.join(";"),
                &format!("{:.3}", u.last_seen),
            ])?;
        }
    }
    for unused in &usage.never_imported {
        for name in &unused.distributions {
            let row = ["never_imported", name, &unused.installation];
            writer.write_record(row.iter().copied().chain([""; 7]))?;
        }
    }
    writer.flush()
}
