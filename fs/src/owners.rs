//! Entries of a directory named after the process that owns them (`call-1234-x`,
//! `.tmp-HASH-1234`): the ones whose process no longer exists (a SIGKILL, a crash) are removed
//! by the next process that looks.

use std::path::Path;

/// Pass to `remove` each entry of `parent` whose owner, read from its name by `owner_of`, is a
/// process that no longer runs. A pid that was reused keeps its entry: only the dead are
/// certain. A `parent` that cannot be read has nothing to remove.
pub fn remove_dead_owners(
    parent: &Path,
    owner_of: impl Fn(&str) -> Option<u32>,
    mut remove: impl FnMut(&Path),
) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let owner = owner_of(&name.to_string_lossy());
        if owner.is_some_and(is_dead) {
            remove(&entry.path());
        }
    }
}

/// Whether no process `pid` exists (this one always does).
pub fn is_dead(pid: u32) -> bool {
    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
}

/// The owner of a name `{prefix}{pid}` or `{prefix}{pid}-...`.
pub fn pid_after(prefix: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    rest.split('-').next()?.parse().ok()
}

/// The owner of a name `{prefix}...-{pid}`.
pub fn pid_at_end(prefix: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    rest.rsplit('-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid above the kernel's maximum (4194304) never runs.
    const DEAD: u32 = 4_194_399;

    #[test]
    fn an_entry_is_passed_on_only_when_its_owner_is_dead() {
        let parent = tempfile::tempdir().unwrap();
        let names = [
            format!("run-{DEAD}-0"),
            format!("run-{}-1", std::process::id()),
            "run-1-2".to_string(),
            format!("call-{DEAD}"),
        ];
        for name in &names {
            std::fs::write(parent.path().join(name), b"").unwrap();
        }
        let mut removed = Vec::new();
        remove_dead_owners(
            parent.path(),
            |name| pid_after("run-", name),
            |path| removed.push(path.file_name().unwrap().to_owned()),
        );
        assert_eq!(removed, [names[0].as_str()]);
    }

    #[test]
    fn an_owner_at_the_end_of_a_name_is_read_after_its_last_dash() {
        let parent = tempfile::tempdir().unwrap();
        let dead = parent.path().join(format!(".tmp-ab-cd-{DEAD}"));
        let alive = parent
            .path()
            .join(format!(".tmp-ab-cd-{}", std::process::id()));
        let unnamed = parent.path().join(".tmp-abcd");
        for dir in [&dead, &alive, &unnamed] {
            std::fs::create_dir(dir).unwrap();
        }
        let mut removed = Vec::new();
        remove_dead_owners(
            parent.path(),
            |name| pid_at_end(".tmp-", name),
            |path| removed.push(path.to_path_buf()),
        );
        assert_eq!(removed, vec![dead]);
    }

    #[test]
    fn names_without_an_owner_have_none() {
        assert_eq!(pid_after("run-", "run-12-3"), Some(12));
        assert_eq!(pid_after("run-", "run-"), None);
        assert_eq!(pid_after("run-", "serve-12"), None);
        assert_eq!(pid_at_end(".evicted-", ".evicted-h-77"), Some(77));
        assert_eq!(pid_at_end(".evicted-", ".evicted-h-x"), None);
    }

    #[test]
    fn an_unreadable_parent_has_nothing_to_remove() {
        let mut called = false;
        remove_dead_owners(
            Path::new("/nonexistent/lfm"),
            |_| Some(DEAD),
            |_| called = true,
        );
        assert!(!called);
    }
}
